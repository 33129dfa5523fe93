"""Which change moved the confounded bed's "Vectorization (d = 2) > Affine" verdict (docs/testing.md)?

Today's tree, the confounded_mlp bed of tests/test_fidelity.py (seeds 100-109, 600 queries, 200k sessions), d = 2
only, with the learned Affine, under (a) today's fixed step budget and (b) 93b7d10's schedule (early stopping: at
most 300 epochs, patience 30, validated every epoch; Vectorization every 50 epochs). XLA's default flags.

    python docs/results/fidelity_vector_eh/affine_schedule/run.py old   OUT_DIR
    python docs/results/fidelity_vector_eh/affine_schedule/run.py today OUT_DIR
"""
import json
import subprocess
import sys
import time
from pathlib import Path

from ltrjax.offline import fidelity as F

OLD_SCHEDULE = {"train": {"max_steps": None, "max_epochs": 300, "patience": 30, "eval_every": 1},
                "train_overrides": {"vectorization": {"eval_every": 50}}}

mode, out = sys.argv[1], Path(sys.argv[2])
t0 = time.time()
res = F.run_checks("confounded_mlp", range(100, 110), n_queries=600, n_sessions=200_000, dims=(2,),
                   over=OLD_SCHEDULE if mode == "old" else None, pbm=False, trust=False,
                   log=lambda m: print(m, flush=True))
res.update(mode=mode, seconds=time.time() - t0, command=" ".join([sys.executable.split("/")[-1], *sys.argv]),
           commit=subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip())
out.mkdir(parents=True, exist_ok=True)
(out / f"confounded_d2_{mode}.json").write_text(json.dumps(res, indent=1, default=float))
for c in res["claims"]:
    print(c["setting"], c["claim"], c["verdict"], c.get("p_value"), c.get("mean_diff"))
