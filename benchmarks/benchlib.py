"""Helpers shared by the benchmark scripts: the composed Hydra config (typed: ``load_run``), data, compile-time
metering, timing, output.

Every script builds what ``python -m ltrjax.run`` builds (``conf/config.yaml`` composed with Hydra, the
algorithm YAMLs through ``ltrjax.runner.make_policy``), so a benchmark measures the configured protocol and
fails loudly, instead of silently measuring something else, when the library's API moves.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import inspect
import json
import math
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONF = ROOT / "conf"


def compose(overrides: list[str] | tuple[str, ...] = ()):
    """``conf/config.yaml`` composed with Hydra and ``overrides`` (as ``python -m ltrjax.run OVERRIDES``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return hydra_compose("config", overrides=list(overrides))


def load_run(overrides: list[str] | tuple[str, ...] = ()):
    """The typed run (``ltrjax.schema.ResolvedRun``: checked, every default filled in, the synthetic dataset without
    ``+dataset``) of ``compose(overrides)``, as ``python -m ltrjax.run OVERRIDES`` resolves it; sets its
    ``jax.matmul_precision`` for this process and relaxes Python's garbage collector, as the entry point does
    (``ltrjax.experiment.configure_process``)."""
    from ltrjax.experiment import configure_process
    from ltrjax.schema import as_run

    run = as_run(compose(overrides))
    configure_process(run.jax.matmul_precision)
    return run


def algorithm_config(name: str):
    """``conf/algorithm/<name>.yaml`` with its ``defaults`` list resolved (``cftopk_concat``: cftopk + concat)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return hydra_compose(f"algorithm/{name}").algorithm


def load_data(run):
    """(query set, padded dataset) of the typed run's dataset (``load_run``), laid out as the runner does
    (``run.layout``), from the data cache ``run.data.cache_dir`` (as ``ltrjax.experiment.run_experiment``)."""
    from ltrjax.data.registry import load_dataset
    from ltrjax.runner import padded_data

    queryset = load_dataset(run.dataset, seed=run.seed, cache_dir=run.data.cache_dir or None)
    return queryset, padded_data(run, queryset)


def online_policy(run, data, algorithm: str):
    """(simulator, policy, tune grid values) of ``algorithm`` (a key of ``run.algorithms``) on ``data``, as
    ``ltrjax.runner.OnlineRun`` builds them for ``python -m ltrjax.run``."""
    from ltrjax.runner import build_simulator, make_policy, result_name

    acfg = run.algorithms[algorithm]
    policy, tune = make_policy(result_name(algorithm, acfg), acfg, data, run.fit_overrides, algorithm)
    return build_simulator(run, data), policy, tune


def phase_timings(results, starts) -> dict:
    """Simulate/train/evaluate seconds summed over the runs that produced ``results`` (``starts``: the first
    member of each run, or of each chunk of a population; members of one run share its timings)."""
    keys = ("simulate", "train", "evaluate")
    return {k: float(sum(results[i].timings.get(k, 0.0) for i in starts)) for k in keys}


# --smoke of the online benchmarks (sweep, end_to_end; sessions_per_sec takes its sim.* part): 60 queries, 1,500
# sessions in 2 segments, so the one retrain between them trains (documents shown > min_impressions times exist);
# equal shapes in every script, so the later ones find the first's single-member programs in a persistent XLA cache
ONLINE_SMOKE = ["dataset.n_queries=60", "sim.sessions=1500", "sim.warmup_sessions_per_query=5", "sim.n_updates=2"]


def add_online_arguments(parser, smoke_help: str) -> None:
    """The arguments every online benchmark shares: dataset preset and size, seed, --smoke, --json, overrides."""
    parser.add_argument("--preset", default="synthetic_mq2007", help="conf/dataset/<preset>.yaml")
    parser.add_argument("--queries", type=int, default=None, help="override the preset's query count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    parser.add_argument("--json", action="store_true", help="print only the JSON object (as the last line)")
    add_cache_arguments(parser)
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides, e.g. sim.n_updates=10")


def add_cache_arguments(parser) -> None:
    """``--cache-dir`` / ``--no-compilation-cache``: where the persistent XLA cache lives, or none."""
    parser.add_argument("--cache-dir", default=None,
                        help="persistent XLA compilation cache folder (default: the one this process already uses, "
                             "else ltrjax.compile_cache.default_cache_dir(), as python -m ltrjax.run)")
    parser.add_argument("--no-compilation-cache", action="store_true",
                        help="compile everything in this process (no persistent cache is read or written)")


def use_compilation_cache(args) -> str | None:
    """Turn on the persistent XLA cache as ``ltrjax.run`` does (``ltrjax.compile_cache``), unless
    ``--no-compilation-cache``; a folder already configured in this process (the tests') is kept unless
    ``--cache-dir`` names one. Returns the folder, or None."""
    import jax

    from ltrjax.compile_cache import enable_compilation_cache

    if args.no_compilation_cache:
        jax.config.update("jax_compilation_cache_dir", None)
        return None
    current = getattr(jax.config, "jax_compilation_cache_dir", None)
    if args.cache_dir is None and current:
        return str(current)
    return enable_compilation_cache(args.cache_dir)


def online_overrides(args) -> list[str]:
    """Hydra overrides of ``add_online_arguments``' values (the smoke sizes under ``--smoke``)."""
    overrides = dataset_overrides(args.preset, args.queries) + [f"seed={args.seed}", "progress=false"]
    if args.smoke:
        overrides += [o for o in ONLINE_SMOKE if not (args.queries and o.startswith("dataset.n_queries"))]
    return overrides


def dataset_overrides(preset: str, queries: int | None) -> list[str]:
    out = [f"+dataset={preset}"]
    if queries:
        out.append(f"dataset.n_queries={int(queries)}")
    return out


# --------------------------------------------------------------------------- compilation
def _compile_events() -> tuple[str, str, str]:
    """JAX's (trace, lower, backend compile) duration event names: its own constants where it still has them
    (private; they moved before), else the names of JAX 0.4-0.10."""
    names = ["/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
             "/jax/core/compile/backend_compile_duration"]
    try:
        from jax._src import dispatch

        for i, attr in enumerate(("JAXPR_TRACE_EVENT", "JAXPR_TO_MLIR_MODULE_EVENT", "BACKEND_COMPILE_EVENT")):
            value = getattr(dispatch, attr, None)
            names[i] = value if isinstance(value, str) else names[i]
    except Exception:  # noqa: BLE001 - the fallback names are used
        pass
    return tuple(names)


_COMPILE_EVENTS = _compile_events()
_BACKEND_EVENT = _COMPILE_EVENTS[-1]
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


class CompileMeter:
    """Seconds JAX spent tracing, lowering and compiling while active, how many programs XLA compiled
    (``compiles``) and how many it read from the persistent cache instead (``cache_hits``).

    Uses ``jax.monitoring`` events (one pair of listeners per process): the backend-compile duration event fires
    for every program handed to the backend, a persistent-cache hit included, so ``compiles`` is those events
    minus the cache-hit events. When the listeners are registered, one tiny program is compiled to check that
    the backend-compile event still arrives; where it does not (a JAX that renamed its events or its monitoring
    API), ``available`` is False and ``seconds``, ``compiles`` and ``cache_hits`` are None instead of a wrong 0.
    ``programs`` breaks the seconds down by the function each event names (JAX passes ``fun_name``).
    """

    _lock = threading.Lock()
    _registered = False
    available = False  # the listeners are registered and saw the probe's backend-compile event
    _backend_events = 0  # every backend-compile event of the process (the probe's check)
    _active: list["CompileMeter"] = []

    def __init__(self):
        self._seconds = 0.0
        self._requests = 0
        self._cache_hits = 0
        self._programs: dict[str, list] = {}  # function name -> [backend requests, seconds]

    @property
    def seconds(self) -> float | None:
        return self._seconds if CompileMeter.available else None

    @property
    def requests(self) -> int | None:
        return self._requests if CompileMeter.available else None

    @property
    def cache_hits(self) -> int | None:
        return self._cache_hits if CompileMeter.available else None

    @property
    def programs(self) -> dict | None:
        """Per function name (``jit(f)`` and ``f`` merged), [programs handed to the backend (compiled or read from
        the persistent cache), tracing + lowering + compile seconds], the most seconds first."""
        if not CompileMeter.available:
            return None
        return dict(sorted(((k, [n, round(t, 3)]) for k, (n, t) in self._programs.items()), key=lambda kv: -kv[1][1]))

    @property
    def compiles(self) -> int | None:
        return self._requests - self._cache_hits if CompileMeter.available else None

    @classmethod
    def _listener(cls, event: str, duration: float, fun_name: str = "?", **_):
        if event in _COMPILE_EVENTS:
            cls._backend_events += event == _BACKEND_EVENT
            name = str(fun_name)
            name = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
            for meter in cls._active:
                meter._seconds += float(duration)
                meter._requests += event == _BACKEND_EVENT
                entry = meter._programs.setdefault(name, [0, 0.0])
                entry[0] += event == _BACKEND_EVENT
                entry[1] += float(duration)

    @classmethod
    def _hit_listener(cls, event: str, **_):
        if event == _CACHE_HIT_EVENT:
            for meter in cls._active:
                meter._cache_hits += 1

    @classmethod
    def _register(cls) -> None:
        """Register the listeners once per process and check them with one fresh program (not metered)."""
        try:
            import jax
            import numpy as np
            from jax import monitoring

            monitoring.register_event_duration_secs_listener(cls._listener)
            monitoring.register_event_listener(cls._hit_listener)
            before = cls._backend_events
            jax.block_until_ready(jax.jit(lambda x: x * 2 + 1)(np.float32(1)))  # a new function: always compiled
            cls.available = cls._backend_events > before
        except Exception:  # noqa: BLE001 - metering is informative; a JAX without these APIs reports None
            cls.available = False
        if not cls.available:
            print("benchlib.CompileMeter: no JAX compile events seen; compile seconds and counts reported as None",
                  file=sys.stderr, flush=True)

    def __enter__(self) -> "CompileMeter":
        with self._lock:
            if not CompileMeter._registered:
                CompileMeter._registered = True
                CompileMeter._register()
            CompileMeter._active.append(self)
        return self

    def __exit__(self, *exc):
        with self._lock:
            CompileMeter._active.remove(self)


def minus(a, b):
    """``a - b``, or None where either is None (a ``CompileMeter`` figure that is not available)."""
    return None if a is None or b is None else a - b


def plus(*xs):
    """The sum of ``xs``, or None where any is None."""
    return None if any(x is None for x in xs) else sum(xs)


def ratio(a, b):
    """``a / b``, or None where either is None or ``b`` is not positive."""
    return None if a is None or b is None or not b > 0 else a / b


# --------------------------------------------------------------------------- timing
# timed calls per program of ``prepare_sharing`` (each a few milliseconds at the MQ2007 shape; the best is kept)
PREPARE_REPEATS = 20


def prepare_program(policy, data, members: int, states=None):
    """(compiled function, its arguments) of the per-segment ``prepare`` of ``members`` members over every bucket
    (``policy.prepare_population``; EBRank's prior alpha in member blocks). The buckets are arguments, as in the
    segment program, not constants folded into the program. ``states`` (one member's initial states, every
    bucket): the program also lays each member's values out in entry order, as ``step.segment_constants`` does."""
    import jax

    from ltrjax.online.host_random import prng_key
    from ltrjax.online.policies.base import stack_members
    from ltrjax.online.step import prepared_in_entry_order

    params = stack_members([policy.init(prng_key(i), data) for i in range(members)])
    if states is None:
        fn = jax.jit(lambda p, buckets: [policy.prepare_population(p, b, None) for b in buckets])
        args = (params, tuple(data.buckets))
    else:
        def laid_out(p, buckets, states):
            out = []
            for b, st in zip(buckets, states):
                prepared = policy.prepare_population(p, b, None)
                out.append(jax.vmap(lambda a, s, b=b: prepared_in_entry_order(policy, a, b, s))(prepared, st))
            return out

        fn = jax.jit(laid_out)
        args = (params, tuple(data.buckets), stack_members([tuple(states)] * members))
    jax.block_until_ready(fn(*args))
    return fn, args


def best_seconds(programs: dict, repeats: int) -> dict:
    """Best-of-``repeats`` wall seconds of each ``(fn, args)`` of ``programs``, the timed calls alternating between
    them in this process (contention hits all alike)."""
    import jax

    best = {m: float("inf") for m in programs}
    for _ in range(max(1, repeats)):
        for m, (fn, args) in programs.items():
            tic = time.perf_counter()
            jax.block_until_ready(fn(*args))
            best[m] = min(best[m], time.perf_counter() - tic)
    return best


def prepare_sharing(policy, data, members: int = 7, repeats: int = PREPARE_REPEATS, states=None) -> dict:
    """Best-of-``repeats`` wall seconds of the per-segment ``prepare`` (``prepare_program``) of ``members`` members
    and of one, and their ratio (issue 22: <= 2 for 7 members; member by member it would be ~7). Each program is
    compiled once; the timed calls alternate between the two in this process, so contention hits both alike.
    ``states`` (one member's initial states): also the same with each member's values laid out in entry order
    (``layout``: what a segment does with them, per member by nature), reported beside the ratio, not in it."""
    best = best_seconds({m: prepare_program(policy, data, m) for m in (1, members)}, repeats)
    out = {"members": members, "one_member_seconds": best[1], "members_seconds": best[members],
           "ratio": ratio(best[members], best[1]), "repeats": max(1, repeats)}
    if states is not None:
        laid = best_seconds({m: prepare_program(policy, data, m, states) for m in (1, members)}, repeats)
        out["with_layout"] = {"one_member_seconds": laid[1], "members_seconds": laid[members],
                              "ratio": ratio(laid[members], laid[1])}
    return out


def simulator_prepare_sharing(sim, policy, key, members: int = 7) -> dict:
    """``prepare_sharing`` on the simulator's data, with the initial states of trial ``key`` (the states a segment
    lays each member's values out with: the counters the policy keeps)."""
    from ltrjax.online.state import kept_counters

    return prepare_sharing(policy, sim.data, members,
                           states=sim.host_init_states(key, kept_counters(policy.counters_read)))


def timed(fn, *args, **kwargs):
    """(result, wall seconds, CPU seconds of this process, all threads) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


class Stopwatch:
    """Accumulates wall and CPU seconds spent inside named callables while installed.

    ``Stopwatch({"plan": (sim, "plan")})`` replaces the attribute ``sim.plan`` by a timing wrapper (an
    instance attribute that shadows the method) until ``__exit__``; a missing attribute is skipped and
    reported as None. ``block`` wrappers wait for their outputs, so asynchronous dispatch is charged to them.
    """

    def __init__(self, targets: dict, block: tuple[str, ...] = ()):
        self.targets = targets
        self.block = set(block)
        self.wall = {name: 0.0 for name in targets}
        self.cpu = {name: 0.0 for name in targets}
        self.calls = {name: 0 for name in targets}
        self._restore = []

    def _wrap(self, name, fn):
        import jax

        def wrapper(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            out = fn(*args, **kwargs)
            if name in self.block:
                jax.block_until_ready(out)
            self.wall[name] += time.perf_counter() - wall
            self.cpu[name] += time.process_time() - cpu
            self.calls[name] += 1
            return out

        return wrapper

    def __enter__(self) -> "Stopwatch":
        for name, (owner, attr) in self.targets.items():
            if isinstance(owner, MutableMapping):
                if attr not in owner:
                    self.wall[name] = self.cpu[name] = None
                    continue
                original = owner[attr]
                owner[attr] = self._wrap(name, original)
                self._restore.append(lambda o=owner, a=attr, f=original: o.__setitem__(a, f))
            else:
                if not hasattr(owner, attr):
                    self.wall[name] = self.cpu[name] = None
                    continue
                shadowed = attr in vars(owner)
                original = getattr(owner, attr)
                setattr(owner, attr, self._wrap(name, original))
                self._restore.append((lambda o=owner, a=attr, f=original: setattr(o, a, f)) if shadowed
                                     else (lambda o=owner, a=attr: delattr(o, a)))
        return self

    def seconds(self, names) -> float:
        """Wall seconds inside the named callables that were installed (the others count nothing)."""
        return float(sum(self.wall[name] or 0.0 for name in names if name in self.wall))

    def __exit__(self, *exc):
        for restore in reversed(self._restore):
            restore()
        self._restore = []


SETUP_PARTS = ("session_plan", "init_states", "policy_init", "device_phase", "member_states")  # setup_seconds
PLAN_PARTS = ("plan",)  # planning_seconds (the host's lane plans; a device set-up plans inside segment_plan)


def trial_targets(sim, policy, trial_setup: str) -> tuple[dict, tuple[str, ...]]:
    """(Stopwatch targets, the names of the compiled programs among them) of ``simulate_frozen`` under
    ``trial_setup`` (``sessions_per_sec.py``, ``end_to_end.py``): the set-up's parts (module or class attributes: every caller reaches them there) and every
    compiled program the trial launches (the segment program; with a device set-up also its draws, summaries,
    initial states, member copies, parameters, per-segment inputs and outputs; a trial's evaluations and refreshes)."""
    from ltrjax.online import device_phase, device_setup, device_trial, plan, programs, protocol

    compiled = programs.compiled(policy)
    runs = {name: (compiled, name) for name in ("segment", "evaluate", "evaluate_rows", "refresh")}
    if trial_setup == "host":
        return ({"session_plan": (protocol, "session_plan"), "init_states": (protocol, "host_init_states"),
                 "policy_init": (policy, "init"), "plan": (plan, "plan"), **runs}, tuple(runs))
    setup = device_trial.DeviceSetup
    names = {"draw": (device_setup, "_draw"), "phase_loads": (device_setup, "phase_loads"),
             "split_plan_keys": (device_setup, "split_plan_keys"), "device_init_states": (device_setup, "init_states"),
             "segment_plan": (device_setup, "segment_plan"), "take_members": (device_setup, "take_members"),
             "init_program": (sim.context.caches.init_programs, policy),
             "session_outputs": (device_phase, "session_outputs"), "refresh_keys": (device_phase, "refresh_keys"),
             **runs}
    parts = {"device_phase": (setup, "_phase"), "policy_init": (setup, "init_members"),
             "init_states": (setup, "initial_states"), "member_states": (setup, "member_states")}
    return {**parts, **names}, tuple(names)


def call_by_name(fn, **available):
    """Call ``fn`` with the values of ``available`` its signature names (positional order does not matter).

    The NumPy reference loop (tests/reference/online_loop.py) changes its signatures now and then; binding by
    name keeps the benchmark working across reorderings and fails with a clear message on a new argument.
    """
    params = inspect.signature(fn).parameters
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n not in available]
    if missing:
        raise TypeError(f"{fn.__module__}.{fn.__qualname__} now needs {missing}; the benchmark knows "
                        f"{sorted(available)}: update benchmarks/ for its new signature")
    return fn(**{n: available[n] for n in params if n in available})


# --------------------------------------------------------------------------- output
def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def emit(out: dict, as_json: bool) -> dict:
    """Print ``out``: a readable listing unless ``as_json``; always one JSON object as the last line."""
    if not as_json:
        for k, v in out.items():
            print(f"{k:>32}: {v}")
    print(json.dumps(out, default=_jsonable), flush=True)
    return out


def _jsonable(x):
    try:
        import numpy as np

        if isinstance(x, np.generic):
            return x.item()
        if isinstance(x, np.ndarray):
            return x.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(x)


def machine() -> dict:
    """Where the numbers were measured: JAX's backend and device, the versions, the host's cores and load."""
    import os
    import platform

    import jax

    try:
        import jaxlib

        jaxlib_version = getattr(jaxlib, "__version__", None) or jaxlib.version.__version__
    except Exception:  # noqa: BLE001 - a version string is informative only
        jaxlib_version = None
    device = jax.devices()[0]
    return {"backend": jax.default_backend(), "device_kind": device.device_kind,
            "devices": jax.device_count(), "cpu_count": os.cpu_count(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "jax_version": jax.__version__, "jaxlib_version": jaxlib_version,
            "python_version": platform.python_version()}
