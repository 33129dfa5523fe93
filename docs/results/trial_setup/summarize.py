"""results.json and results.md of docs/results/trial_setup from the measurements' JSON outputs (command.txt).

    python docs/results/trial_setup/summarize.py OUT_DIR   # OUT_DIR: the folder the commands wrote to
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def last_json(path: Path) -> dict:
    return json.loads(path.read_text().strip().splitlines()[-1])


def sps_rows(sps: dict) -> list[dict]:
    rows = []
    for population, entry in sps["detail"]["ebrank"].items():
        for setup, m in entry["by_trial_setup"].items():
            rows.append({"members": int(population), "trial_setup": setup, **{k: m[k] for k in (
                "wall_seconds", "program_seconds", "host_seconds", "serialized_host_seconds", "setup_seconds",
                "planning_seconds", "h2d_bytes_per_segment", "h2d_setup_bytes", "wall_sessions_per_sec",
                "program_sessions_per_sec", "lanes", "steps_per_segment", "lane_occupancy")},
                         "program_parts": {k: v for k, v in m["program_parts"].items() if v}})
    return rows


def baseline(path: Path) -> dict:
    d = json.loads((path / "results.json").read_text())
    return {"baseline_ratio": d["summary"]["baseline_ratio"], "pair_ratios": d["summary"]["pair_ratios"],
            "walls": [(r["label"], round(r["wall_seconds"], 2)) for r in d["runs"]],
            "compiles": sorted({(r["label"], r["json"]["compiles"]) for r in d["runs"]
                                if r["json"] and "compiles" in r["json"]})}


def main(out: Path) -> None:
    sps = last_json(out / "sps.out")
    e2e = {s: last_json(out / f"e2e_{s}.out") for s in ("host", "device")}
    exact = json.loads((HERE / "exactness.json").read_text())
    record = {
        "machine": {k: sps[k] for k in ("backend", "device_kind", "cpu_count", "jax_version")},
        "exactness": {name: {k: c[k] for k in ("equal", "max_abs_diff", "members") if k in c}
                      | ({"same_choice": c["same_choice"]} if "same_choice" in c else {})
                      for name, c in exact["cases"].items()},
        "exactness_dataset": {"dataset": exact["dataset"], "queries": exact["queries"], "seeds": exact["seeds"]},
        "sessions_per_sec": {"queries": sps["queries"], "sessions_per_member": sps["sessions"],
                             "rows": sps_rows(sps)},
        # the same command with --repeats 3 while another job ran at nice 5 (a second look at the small host figures)
        "sessions_per_sec_loaded": sps_rows(last_json(out / "sps_loaded.out")) if (out / "sps_loaded.out").exists()
        else None,
        "end_to_end": {s: {"run_seconds": e["run_seconds"], "compile_seconds": e["compile_seconds"],
                           "compiles": e["compiles"], "cum_ndcg": e["cum_ndcg"],
                           "warm": {k: v for k, v in e["warm_breakdown"].items() if k != "program_parts"}}
                       for s, e in e2e.items()},
        "vs_7fa33d7": {name: baseline(out / name) for name in ("bl_e2e", "bl_sps") if (out / name).exists()},
    }
    (HERE / "results.json").write_text(json.dumps(record, indent=1) + "\n")
    (HERE / "results.md").write_text(markdown(record))


def markdown(r: dict) -> str:
    rows = r["sessions_per_sec"]["rows"]
    by = {(x["members"], x["trial_setup"]): x for x in rows}
    lines = ["# The trial set up on the device (issue 40), on the project's 2-core CPU", "",
             "Commands: [`command.txt`](command.txt); the numbers below are read from `results.json` by "
             "`summarize.py`. Measured alone on the machine (no helper running), except where a row says so.", "",
             "## Exactness (`benchmarks/trial_setup_check.py --json`)", "",
             f"{r['exactness_dataset']['dataset']}, {r['exactness_dataset']['queries']} queries, "
             "`sim.click_rng=device` in both set-ups; per member every main session's NDCG, Cum-NDCG, the "
             "evaluation history, per-query NDCG, every counter of the final state and every parameter compared:", "",
             "| case | members | equal bit for bit | max abs diff | same ε |", "|---|---:|---|---:|---|"]
    for name, c in r["exactness"].items():
        lines.append(f"| {name} | {c['members']} | {c['equal']} | {c['max_abs_diff']} | {c.get('same_choice', '')} |")
    lines += ["", f"## Where the wall goes: `sessions_per_sec.py` (EBRank, {r['sessions_per_sec']['queries']} queries, "
              f"{r['sessions_per_sec']['sessions_per_member']:,} main sessions per member, all 20 segments)", "",
              "`host_seconds` = the run's wall minus every compiled program's seconds (taken in a second run that "
              "waits for each program); `serialized host` = that second run's own wall minus its programs (no "
              "overlap: the Python and NumPy work alone).", "",
              "| P | set-up | wall s | programs s | host s | serialized host s | set-up s | planning s | "
              "bytes to device / segment | wall sessions/s |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in rows:
        lines.append(f"| {x['members']} | {x['trial_setup']} | {x['wall_seconds']:.3f} | {x['program_seconds']:.3f} | "
                     f"{x['host_seconds']:.3f} | {x['serialized_host_seconds']:.4f} | {x['setup_seconds']:.3f} | "
                     f"{x['planning_seconds']:.3f} | {x['h2d_bytes_per_segment']:,.0f} | "
                     f"{x['wall_sessions_per_sec']:,.0f} |")
    pops = sorted({x["members"] for x in rows})
    if len(pops) >= 2 and all((p, s) in by for p in pops[:1] + pops[-1:] for s in ("host", "device")):
        lo, hi = pops[0], pops[-1]
        for s in ("device", "host"):
            a, b = by[(lo, s)]["serialized_host_seconds"], by[(hi, s)]["serialized_host_seconds"]
            lines.append(f"\nSerialized host seconds, P = {hi} over P = {lo}, {s} set-up: {b:.4f} / {a:.4f} = "
                         f"**{b / a:.2f}×**.")
        for p in pops:
            d, h = by[(p, "device")], by[(p, "host")]
            lines.append(f"\nAt P = {p} the device set-up's wall is {d['wall_seconds'] / h['wall_seconds']:.2f}× the "
                         f"host's; its programs: " + ", ".join(f"{k} {v:.3f} s" for k, v in d["program_parts"].items()))
    if r["sessions_per_sec_loaded"]:
        loaded = {(x["members"], x["trial_setup"]): x["serialized_host_seconds"] for x in r["sessions_per_sec_loaded"]}
        lines.append("\nThe same command with `--repeats 3` (median of three waiting runs) while another job ran at nice 5: "
                     "serialized host seconds " + ", ".join(f"P = {p} {s} {v:.4f}" for (p, s), v in sorted(loaded.items()))
                     + ".")
    lines += ["", "## One whole EBRank trial: `end_to_end.py --breakdown` (cold XLA cache, then two warm runs)", "",
              "| set-up | cold run s | compile s | programs compiled | Cum-NDCG | warm wall s | warm programs s | "
              "warm retrains s | warm host s | bytes to device / segment |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s, e in r["end_to_end"].items():
        w = e["warm"]
        lines.append(f"| {s} | {e['run_seconds']:.2f} | {e['compile_seconds']:.2f} | {e['compiles']} | "
                     f"{e['cum_ndcg']:.4f} | {w['wall_seconds']:.3f} | {w['program_seconds']:.3f} | "
                     f"{w['train_seconds']:.3f} | {w['host_seconds']:.3f} | {w['h2d_bytes_per_segment']:,.0f} |")
    lines += ["", "## `auto` (host on a CPU) against the commit before this work, 7fa33d7 (`benchmarks/baseline.py`, "
              "alternating, fresh XLA caches)", "", "| command | baseline_ratio | per pair | walls s | programs compiled |",
              "|---|---:|---|---|---|"]
    names = {"bl_e2e": "`end_to_end.py --json`", "bl_sps": "`sessions_per_sec.py --json --families ebrank "
                                                            "--populations 1,8 --repeats 1`"}
    for key, b in r["vs_7fa33d7"].items():
        lines.append(f"| {names[key]} | **{b['baseline_ratio']:.3f}** | "
                     f"{', '.join(f'{x:.3f}' for x in b['pair_ratios'])} | "
                     f"{', '.join(f'{label} {w}' for label, w in b['walls'])} | "
                     f"{', '.join(f'{label} {c}' for label, c in b['compiles'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
