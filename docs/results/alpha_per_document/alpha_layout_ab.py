"""EBRank's per-segment prepare for 1 and 7 members at a preset's shape, alone and with each member's values laid
out in entry order (what segment_constants does), for this checkout (works at 9f94408 and after)."""
import json, sys, time
sys.path.insert(0, "benchmarks")
from benchlib import load_run, load_data
import jax
from ltrjax.online import step as step_lib
from ltrjax.online.host_random import prng_key
from ltrjax.online.policies.base import stack_members
from ltrjax.online.state import kept_counters, to_entry_order
from ltrjax.runner import build_simulator, make_policy, trial_key
preset = sys.argv[1] if len(sys.argv) > 1 else "synthetic_mq2007"
cfg = load_run([f"+dataset={preset}", "progress=false"])
_, data = load_data(cfg)
policy, _ = make_policy("ebrank", cfg.algorithms["ebrank"], data, cfg.fit_overrides, "ebrank")
sim = build_simulator(cfg, data)
states = sim.host_init_states(trial_key(cfg, 0), kept_counters(policy.counters_read))
lay = getattr(step_lib, "prepared_in_entry_order", None) or (lambda p, a, b, s: to_entry_order(a, s))
def program(m, layout):
    params = stack_members([policy.init(prng_key(i), data) for i in range(m)])
    if layout:
        fn = jax.jit(lambda p, bs, sts: [jax.vmap(lambda a, s, b=b: lay(policy, a, b, s))(policy.prepare_population(p, b, None), st) for b, st in zip(bs, sts)])
        args = (params, tuple(data.buckets), stack_members([tuple(states)] * m))
    else:
        fn = jax.jit(lambda p, bs: [policy.prepare_population(p, b, None) for b in bs])
        args = (params, tuple(data.buckets))
    jax.block_until_ready(fn(*args)); return fn, args
progs = {(m, l): program(m, l) for m in (1, 7) for l in (False, True)}
best = {k: 1e9 for k in progs}
for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 30):
    for k, (fn, args) in progs.items():
        t = time.perf_counter(); jax.block_until_ready(fn(*args)); best[k] = min(best[k], time.perf_counter() - t)
print(json.dumps({"preset": preset, **{f"m{m}_{'layout' if l else 'prepare'}_ms": v * 1e3 for (m, l), v in best.items()},
                  "prepare_7_over_1": best[(7, False)] / best[(1, False)], "layout_7_over_1": best[(7, True)] / best[(1, True)]}))
