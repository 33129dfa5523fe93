"""Collect the runs of recovery.py into results.json (per run: command, per-seed figures, means; floats rounded,
no o_k matrices) and print the table of results.md.

    python docs/results/fidelity_vector_eh/recovery/summarize.py RUN_DIR docs/results/fidelity_vector_eh/recovery/results.json
"""

import json
import pathlib
import sys

import numpy as np

RUNS = ["base", "links_base", "expected", "links_expected", "sessions2m", "boost0", "shuffle4", "junk1",
        "sharp_expected", "loglink_expected", "sharp_loglink_expected"]
KEYS = ["ndcg", "selected_step", "cos_selected", "cos_last", "cos_max_over_traj", "cos_last_with_ones",
        "cos_oracle_r_softmax", "cos_oracle_r_rate"]


def rnd(x):
    if isinstance(x, float):
        return round(x, 4)
    if isinstance(x, list):
        return [rnd(v) for v in x]
    if isinstance(x, dict):
        return {k: rnd(v) for k, v in x.items()}
    return x


def main(src, out):
    res = {}
    for name in RUNS:
        p = pathlib.Path(src) / f"{name}.json"
        if not p.exists():
            continue
        d = json.loads(p.read_text())
        seeds = []
        for r in d["runs"]:
            keep = {k: v for k, v in r.items() if not k.startswith("o_")}
            if "link_fits" in keep:
                keep["link_fits"] = {lk: {k: v for k, v in f.items() if k != "o_last"} for lk, f in r["link_fits"].items()}
            seeds.append(rnd(keep))
        mean = {k: round(float(np.mean([r[k] for r in d["runs"] if r.get(k) is not None])), 4)
                for k in KEYS if any(r.get(k) is not None for r in d["runs"])}
        for lk in ("softmax", "identity"):
            if all("link_fits" in r for r in d["runs"]):
                mean[f"link_{lk}_cos_last"] = round(float(np.mean([r["link_fits"][lk]["cos_last"] for r in d["runs"]])), 4)
                mean[f"link_{lk}_cos_last_min"] = round(float(np.min([r["link_fits"][lk]["cos_last"] for r in d["runs"]])), 4)
        res[name] = {"command": d["command"], "mean": mean, "seeds": seeds}
        print(name, mean)
    pathlib.Path(out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
