"""One command at a baseline commit and in this tree, back to back: wall time, peak memory, outputs, the ratio.

Checks the baseline revision out into a git worktree (``git worktree add --detach``), then runs the same
command in that tree and in this one (the tree this script is in, uncommitted changes included), alternately
or in a fixed order, ``--repeat`` times each. Every run is a fresh process started from the tree's root with
``PYTHONPATH`` set to that tree, under a small wrapper process that measures it:

* ``wall_seconds``: from start to exit of the command;
* ``peak_rss_bytes``: the largest peak resident memory of any process of the command's tree
  (``getrusage(RUSAGE_CHILDREN).ru_maxrss`` in the wrapper, which runs nothing else);
* ``peak_tree_rss_bytes``: the largest sum of resident memory over the command's process tree, sampled every
  0.2 s (``psutil``; null without it);
* ``user_seconds``, ``system_seconds``: CPU time of the command's processes;
* the load average before and after.

Each run's stdout and stderr are kept (``runs/LABEL-I/stdout.txt``); a last stdout line that is JSON (the
benchmarks' ``--json``) is parsed into the run's record, and so is the ``results.json`` of a run folder
(``python -m ltrjax.run``: ``wall_seconds``, ``peak_rss_bytes``, ``feature_bytes``). Writes ``results.json``,
``results.md`` and ``command.txt`` to ``--out``, with

    baseline_ratio = median wall seconds in this tree / median wall seconds at the baseline

(and ``pair_ratios``, the same per repeat; ``peak_rss_ratio`` likewise). Whether anything else ran on the
machine meanwhile is for you to say (``--note``); the load averages hint at it.

The command is what follows ``--``: a script path relative to the tree (``benchmarks/sweep.py --json``) or
interpreter options (``-m ltrjax.run ...``), run with ``--python`` (default: this interpreter). An argument
``{out}`` is replaced by the run's own folder (``runs/LABEL-I``); ``-m ltrjax.run`` without ``hydra.run.dir=``
gets ``hydra.run.dir={out}``, so each run writes a fresh run folder. Both trees get the same environment:
the data folders of ``conf/dataset/*.yaml`` (their ``path_env`` variables, set to this tree's
``default_path`` where that exists and the variable is unset), so a baseline tree elsewhere reads the same
data. A command the baseline does not accept (a flag added since) fails there, and this script stops
saying so, with the command's last lines of stderr (``--keep-going``: after every run, naming every failure);
either way it writes results.json/md and prints the summary JSON before it exits with status 1.

Compilation caches (``--xla-cache``): ``fresh`` (default) gives every run an empty persistent XLA cache, a cold
start as on a new machine; ``tree`` one folder per tree, kept across its repeats (the first cold, later ones
warm); ``default`` leaves the user's cache as it is; ``off`` disables JAX's persistent cache
(``JAX_ENABLE_COMPILATION_CACHE=false``). ``fresh`` and ``tree`` point ``$LTRJAX_CACHE`` at a folder of their
own whose entries link to the real data cache's (parsed LETOR files), all but its XLA folders, so data is
not parsed again, and drop a ``JAX_COMPILATION_CACHE_DIR`` of the environment. A ``data.cache_dir=`` override in
the command wins over all of them.

    python benchmarks/baseline.py --out /tmp/bl_sweep -- benchmarks/sweep.py --json
    python benchmarks/baseline.py --repeat 2 --out /tmp/bl_mslr -- -m ltrjax.run +dataset=synthetic_mslr30k
    python benchmarks/baseline.py --baseline 93b7d10 --worktree /tmp/wt93 --keep-worktree --out /tmp/x -- ...
    python benchmarks/baseline.py --smoke --json     # baseline HEAD, a tiny command: seconds
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import ratio  # noqa: E402  (benchlib imports only the standard library at module level)
DEFAULT_BASELINE = "93b7d10"
LABELS = ("baseline", "current")
XLA_FOLDERS = ("xla", "xla-tests")  # the persistent compilation caches inside a data cache root
# the --smoke command: prints which ltrjax it imported, so the test sees each run used its own tree
SMOKE_COMMAND = ["-c", "import json, ltrjax; print(json.dumps({'ltrjax_file': ltrjax.__file__}))"]

# The wrapper around each run (a fresh interpreter, so RUSAGE_CHILDREN covers this run only):
# argv = record path, stdout path, stderr path, timeout seconds, command...
MEASURE = r"""
import json, os, resource, signal, subprocess, sys, threading, time
record, out, err, timeout, cmd = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5:]
try:
    import psutil
except ImportError:
    psutil = None
peak_tree = [0 if psutil else None]
done = threading.Event()
def sample(pid):
    try:
        root = psutil.Process(pid)
    except Exception:
        return
    while not done.is_set():
        try:
            procs = [root] + root.children(recursive=True)
            total = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                except Exception:
                    pass
            peak_tree[0] = max(peak_tree[0], total)
        except Exception:
            pass
        done.wait(0.2)
load_before = list(os.getloadavg())
start = time.perf_counter()
with open(out, "wb") as fo, open(err, "wb") as fe:
    proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, start_new_session=True)
    if psutil:
        threading.Thread(target=sample, args=(proc.pid,), daemon=True).start()
    timed_out = False
    try:
        rc = proc.wait(timeout=timeout if timeout > 0 else None)
    except subprocess.TimeoutExpired:
        timed_out = True
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if timed_out:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = 124
wall = time.perf_counter() - start
done.set()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
scale = 1 if sys.platform == "darwin" else 1024
json.dump({"returncode": rc, "timed_out": timed_out, "wall_seconds": wall,
           "peak_rss_bytes": int(ru.ru_maxrss) * scale, "peak_tree_rss_bytes": peak_tree[0],
           "user_seconds": ru.ru_utime, "system_seconds": ru.ru_stime,
           "load_average_before": load_before, "load_average_after": list(os.getloadavg())}, open(record, "w"))
"""


class BaselineError(SystemExit):
    """A failure this script explains in one message (exit status 1)."""

    def __init__(self, message: str):
        super().__init__(f"baseline.py: {message}")


def git(*args: str, cwd: Path = ROOT) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BaselineError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def current_tree() -> dict:
    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"tree": str(ROOT), "commit": commit, "dirty": dirty}


def checkout(revision: str, folder: Path | None, keep: bool) -> tuple[dict, Path, bool]:
    """A detached worktree of ``revision`` (reused when ``folder`` already is one at that commit); returns its
    description, its path and whether this script should remove it at the end."""
    commit = git("rev-parse", "--verify", f"{revision}^{{commit}}")
    if folder is not None and (folder / ".git").exists():
        have = git("rev-parse", "HEAD", cwd=folder)
        if have != commit:
            raise BaselineError(f"{folder} is a checkout of {have[:10]}, not of {revision} ({commit[:10]})")
        return {"revision": revision, "commit": commit, "tree": str(folder), "reused": True}, folder, False
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix=f"ltrjax-baseline-{commit[:8]}-")) / "tree"
    elif folder.exists() and any(folder.iterdir()):
        raise BaselineError(f"--worktree {folder} exists and is not a checkout: give an empty or new folder")
    git("worktree", "add", "--detach", str(folder), commit)
    return {"revision": revision, "commit": commit, "tree": str(folder), "reused": False}, folder, not keep


def remove_worktree(folder: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, capture_output=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)
    if folder.name == "tree" and folder.parent.name.startswith("ltrjax-baseline-"):
        shutil.rmtree(folder.parent, ignore_errors=True)


def data_env() -> dict[str, str]:
    """``path_env`` of every dataset config of this tree whose ``default_path`` exists here, set to it (where
    unset), so that a baseline tree elsewhere reads the same data folders."""
    import yaml

    env = {}
    for path in sorted((ROOT / "conf" / "dataset").glob("*.yaml")):
        try:
            spec = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError:
            continue
        if not isinstance(spec, dict) or "path_env" not in spec or "default_path" not in spec:
            continue  # a dataset config without a data folder of its own (a toy set)
        name, default = spec["path_env"], spec["default_path"]
        if not name or not default or os.environ.get(name):
            continue
        folder = (ROOT / default).resolve()
        if folder.is_dir():
            env[name] = str(folder)
    return env


def data_cache_root() -> Path:
    """The data cache root the runs would use (``ltrjax.data.cache.cache_root``: ``$LTRJAX_CACHE`` or
    ``~/.cache/ltrjax``), without importing ltrjax."""
    env = os.environ.get("LTRJAX_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ltrjax"


def cache_folder(folder: Path) -> Path:
    """``folder`` as a data cache root: links to every entry of the real root but its XLA caches."""
    folder.mkdir(parents=True, exist_ok=True)
    real = data_cache_root()
    if real.is_dir():
        for entry in real.iterdir():
            link = folder / entry.name
            if entry.name not in XLA_FOLDERS and not link.exists():
                link.symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    return folder


def command_for(command: list[str], run_dir: Path) -> list[str]:
    out = [a.replace("{out}", str(run_dir)) for a in command]
    if out[:2] == ["-m", "ltrjax.run"] and not any(a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))
                                                   for a in out):
        out.append(f"hydra.run.dir={run_dir}")
    return out


def last_json(text: str):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def run_record_of(run_dir: Path) -> dict | None:
    """What a ``python -m ltrjax.run`` folder says of the run (None when the command wrote none)."""
    path = run_dir / "results.json"
    if not path.is_file():
        return None
    try:
        res = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    keys = ("dataset", "sessions", "trials", "wall_seconds", "peak_rss_bytes", "feature_bytes",
            "peak_rss_over_feature_bytes")
    out = {k: res.get(k) for k in keys if k in res}
    out["rows"] = {name: {m: entry.get(m) for m in ("cum_ndcg", "warm_ndcg", "cold_ndcg") if m in entry}
                   for name, entry in (res.get("algorithms") or {}).items()}
    return out


def machine() -> dict:
    """Where the runs ran (without importing JAX in this process)."""
    from importlib import metadata

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    cpu = None
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), None)
    except OSError:
        pass
    memory = None
    try:
        memory = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                          if line.startswith("MemTotal"))) * 1024
    except (OSError, StopIteration, ValueError):
        pass
    return {"hostname": platform.node(), "platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "memory_bytes": memory, "python": sys.version.split()[0], "jax": version("jax"),
            "jaxlib": version("jaxlib"), "jax_platforms": os.environ.get("JAX_PLATFORMS")}


def schedule(repeat: int, order: str) -> list[tuple[int, str]]:
    """(repeat, label) in run order: ``alternate`` = B C, C B, B C, ... (each tree first as often as it can)."""
    runs = []
    for i in range(repeat):
        pair = list(LABELS) if order == "baseline-first" or (order == "alternate" and i % 2 == 0) \
            else list(reversed(LABELS))
        runs += [(i, label) for label in pair]
    return runs


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["returncode"] == 0]
    walls = {lab: [r["wall_seconds"] for r in ok if r["label"] == lab] for lab in LABELS}
    rss = {lab: [r["peak_rss_bytes"] for r in ok if r["label"] == lab] for lab in LABELS}
    by_repeat = {}
    for r in ok:
        by_repeat.setdefault(r["repeat"], {})[r["label"]] = r
    pairs = [ratio(p["current"]["wall_seconds"], p["baseline"]["wall_seconds"])
             for _, p in sorted(by_repeat.items()) if len(p) == 2]
    rows = {lab: next((r["run_record"]["rows"] for r in ok if r["label"] == lab and r.get("run_record")), None)
            for lab in LABELS}
    diffs = None
    if rows["baseline"] and rows["current"]:  # the first run folder of each tree: did the results move?
        diffs = {name: {m: abs(rows["current"][name][m] - v) for m, v in metrics.items()
                        if isinstance(v, (int, float)) and isinstance(rows["current"][name].get(m), (int, float))}
                 for name, metrics in rows["baseline"].items() if name in rows["current"]}
    return {"row_metrics_abs_diff": diffs,
            "row_metrics_max_abs_diff": max((d for row in diffs.values() for d in row.values()), default=None)
            if diffs else None,
            "baseline_wall_seconds": walls["baseline"], "current_wall_seconds": walls["current"],
            "baseline_ratio": ratio(median(walls["current"]), median(walls["baseline"])),
            "pair_ratios": pairs,
            "baseline_peak_rss_bytes": rss["baseline"], "current_peak_rss_bytes": rss["current"],
            "peak_rss_ratio": ratio(median(rss["current"]), median(rss["baseline"]))}


def markdown(result: dict) -> str:
    b, c = result["baseline"], result["current"]
    gb = (lambda x: "–" if x is None else f"{x / 1e9:.2f}")
    fmt = (lambda x, spec: "–" if x is None else format(x, spec))
    lines = [f"# Back to back: {c['commit'][:10]}{' (+ uncommitted changes)' if c['dirty'] else ''} against "
             f"{b['revision']} ({b['commit'][:10]})", "",
             "```bash", result["invocation"], "```", "",
             f"Command in each tree (from its root, `PYTHONPATH` = the tree): `{shlex.join(result['command'])}`; "
             f"{result['repeat']} repeat(s), order {result['order']}, XLA cache `{result['xla_cache']}`. "
             f"Machine: {result['machine']['cpu']}, {result['machine']['cpu_count']} cores, "
             f"{gb(result['machine']['memory_bytes'])} GB; JAX {result['machine']['jax']}. "
             f"{result['started']} – {result['finished']}.", ""]
    if result.get("note"):
        lines += [f"Note: {result['note']}", ""]
    lines += ["| # | tree | commit | status | wall s | peak RSS GB (largest process) | peak tree RSS GB (sampled) | "
              "CPU s (user + sys) | load before → after | run's own record |",
              "|---:|---|---|---:|---:|---:|---:|---:|---|---|"]
    for i, r in enumerate(result["runs"]):
        rec = r.get("run_record") or {}
        own = ""
        if rec.get("peak_rss_bytes"):
            own = f"peak {gb(rec['peak_rss_bytes'])} GB"
            if rec.get("feature_bytes"):
                own += (f" = {rec['peak_rss_bytes'] / rec['feature_bytes']:.2f}× the float32 features "
                        f"({rec['feature_bytes'] / 1e6:.1f} MB)")
        if rec.get("wall_seconds") is not None:
            own = (own + "; " if own else "") + f"wall {rec['wall_seconds']:.1f} s"
        commit = (b if r["label"] == "baseline" else c)["commit"][:10]
        lb, la = r["load_average_before"][0], r["load_average_after"][0]
        lines.append(f"| {i} | {r['label']} | {commit} | {r['returncode']} | {r['wall_seconds']:.1f} | "
                     f"{gb(r['peak_rss_bytes'])} | {gb(r['peak_tree_rss_bytes'])} | "
                     f"{r['user_seconds'] + r['system_seconds']:.1f} | {lb:.2f} → {la:.2f} | {own} |")
    s = result["summary"]
    pairs = ", ".join(f"{p:.3f}" for p in s["pair_ratios"] if p is not None)
    lines += ["", f"**baseline_ratio** (median wall here / median wall at the baseline): "
              f"**{fmt(s['baseline_ratio'], '.3f')}** (per repeat: {pairs or '–'}); "
              f"peak RSS ratio {fmt(s['peak_rss_ratio'], '.3f')}.", ""]
    if s.get("row_metrics_max_abs_diff") is not None:  # None: no Cum/Warm/Cold-NDCG in the rows (an offline run)
        lines += [f"Rows' mean Cum/Warm/Cold-NDCG of the first run folder of each tree: largest absolute difference "
                  f"{s['row_metrics_max_abs_diff']:.3g} ("
                  + "; ".join(f"{name}: " + ", ".join(f"{m} {d:.3g}" for m, d in row.items())
                              for name, row in s["row_metrics_abs_diff"].items())
                  + "); `experiments/compare_runs.py` tests whether a difference is noise.", ""]
    lines += ["Peak RSS (largest process): `getrusage(RUSAGE_CHILDREN).ru_maxrss` of a wrapper that runs only the "
              "command; peak tree RSS: the largest sum over the command's processes, sampled every 0.2 s. "
              "Each run's output: `runs/<tree>-<repeat>/`."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    else:
        command = []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     usage="%(prog)s [options] -- COMMAND ...  (e.g. -- benchmarks/sweep.py --json, or "
                                           "-- -m ltrjax.run +dataset=synthetic_mslr30k; or --smoke)")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="revision to compare with (default 93b7d10)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a new temporary folder)")
    parser.add_argument("--worktree", type=Path, default=None,
                        help="where to check the baseline out (a checkout of it there is reused; default: a "
                             "temporary folder, removed at the end)")
    parser.add_argument("--keep-worktree", action="store_true", help="do not remove the worktree made here")
    parser.add_argument("--repeat", type=int, default=1, help="runs per tree")
    parser.add_argument("--order", choices=("alternate", "baseline-first", "current-first"), default="alternate")
    parser.add_argument("--xla-cache", choices=("fresh", "tree", "default", "off"), default="fresh",
                        help="persistent XLA cache of each run (see the module docstring)")
    parser.add_argument("--python", default=sys.executable, help="interpreter of both trees' runs")
    parser.add_argument("--timeout", type=float, default=0, help="seconds per run (0: none)")
    parser.add_argument("--note", default="", help="what else ran on the machine, etc. (into results.md)")
    parser.add_argument("--keep-going", action="store_true", help="go on after a failed run")
    parser.add_argument("--smoke", action="store_true",
                        help="baseline HEAD, a tiny command that prints which ltrjax it imported, 2 repeats")
    parser.add_argument("--json", action="store_true", help="print only the summary JSON (as the last line)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.baseline = "HEAD" if args.baseline == DEFAULT_BASELINE else args.baseline
        command = command or SMOKE_COMMAND
        args.repeat = max(args.repeat, 2)
    if not command:
        parser.error("give the command after --, e.g. -- benchmarks/sweep.py --json")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    out = args.out or Path(tempfile.mkdtemp(prefix="ltrjax-baseline-out-"))
    out.mkdir(parents=True, exist_ok=True)
    invocation = shlex.join(["python", "benchmarks/baseline.py", *argv, "--", *command])
    current = current_tree()
    env_common = data_env()
    baseline, base_tree, remove = checkout(args.baseline, args.worktree, args.keep_worktree)
    trees = {"baseline": base_tree, "current": ROOT}
    if args.xla_cache == "off":
        env_common["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    result = {"invocation": invocation, "command": command, "baseline": baseline, "current": current,
              "repeat": args.repeat, "order": args.order, "xla_cache": args.xla_cache, "python": args.python,
              "env": dict(env_common), "note": args.note, "machine": machine(),
              "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "runs": []}
    lines = [invocation, ""]
    failures = []
    try:
        for repeat, label in schedule(args.repeat, args.order):
            tree = trees[label]
            run_dir = (out / "runs" / f"{label}-{repeat}").resolve()
            if run_dir.exists():
                shutil.rmtree(run_dir)
            run_dir.mkdir(parents=True)
            cmd = [args.python, *command_for(command, run_dir)]
            env = {**os.environ, **env_common, "PYTHONPATH": str(tree)}
            if args.xla_cache in ("fresh", "tree"):  # the cache under $LTRJAX_CACHE, not one set outside
                env.pop("JAX_COMPILATION_CACHE_DIR", None)
            if args.xla_cache == "fresh":
                env["LTRJAX_CACHE"] = str(cache_folder(out / "cache" / f"{label}-{repeat}").resolve())
            elif args.xla_cache == "tree":
                env["LTRJAX_CACHE"] = str(cache_folder(out / "cache" / label).resolve())
            lines.append(f"# {label} {repeat} in {tree}: " + shlex.join(cmd))
            if not args.json:
                print(f"[{label} {repeat}] {shlex.join(cmd)}", flush=True)
            record_path = run_dir / "measure.json"
            wrapper = subprocess.run([sys.executable, "-c", MEASURE, str(record_path), str(run_dir / "stdout.txt"),
                                      str(run_dir / "stderr.txt"), str(args.timeout), *cmd], cwd=tree, env=env,
                                     capture_output=True, text=True)
            if wrapper.returncode != 0 or not record_path.is_file():
                failures.append(f"could not start {shlex.join(cmd)} in {tree}: {wrapper.stderr.strip()[-2000:]}")
                break
            rec = json.loads(record_path.read_text())
            stdout = (run_dir / "stdout.txt").read_text(errors="replace")
            rec.update({"label": label, "repeat": repeat, "tree": str(tree), "run_dir": str(run_dir),
                        "ltrjax_cache": env.get("LTRJAX_CACHE"), "json": last_json(stdout),
                        "run_record": run_record_of(run_dir)})
            result["runs"].append(rec)
            if not args.json:
                print(f"[{label} {repeat}] status {rec['returncode']}, {rec['wall_seconds']:.1f} s, peak RSS "
                      f"{rec['peak_rss_bytes'] / 1e9:.2f} GB", flush=True)
            if rec["returncode"] != 0:
                tail = (run_dir / "stderr.txt").read_text(errors="replace").strip().splitlines()[-15:]
                failures.append(f"the command failed in the {label} tree ({tree}, "
                                f"{(baseline if label == 'baseline' else current)['commit'][:10]}) with status "
                                f"{rec['returncode']}{' (timed out)' if rec['timed_out'] else ''}; its stderr "
                                "ends:\n  " + "\n  ".join(tail))
                if not args.keep_going:
                    break
    finally:
        try:  # first, so that nothing below (a results.md that does not format) leaks the temporary worktree
            if remove:
                remove_worktree(base_tree)
        finally:
            result["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            result["summary"] = summarize(result["runs"])
            result["failed"] = "\n".join(failures) or None
            (out / "command.txt").write_text("\n".join(lines) + "\n")
            (out / "results.json").write_text(json.dumps(result, indent=1) + "\n")
            if result["runs"]:
                (out / "results.md").write_text(markdown(result))
    summary = {**result["summary"], "baseline_commit": baseline["commit"], "current_commit": current["commit"],
               "current_dirty": current["dirty"], "out": str(out), "failed": result["failed"]}
    if not args.json and result["runs"]:
        print((out / "results.md").read_text())
    print(json.dumps(summary))
    if failures:  # every failure (--keep-going goes on after each), after the summary
        raise BaselineError(result["failed"])
    return result


if __name__ == "__main__":
    main()
