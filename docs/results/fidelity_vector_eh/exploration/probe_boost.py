# Record of a one-off run (README "Offline fidelity"), kept with its output for traceability; run from the repo root
# with the venv active at the commit named in confounded.md. Not part of the package and not maintained.
import sys, json, time
from ltrjax.offline import fidelity as F
from ltrjax.offline.experiment import _merge
w = float(sys.argv[1]); d = int(sys.argv[2]); seeds = [int(x) for x in sys.argv[3].split(",")]
noise = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
ranker = sys.argv[5] if len(sys.argv) > 5 else "linear"
qs = F.basis_queryset(n_queries=300, noise=noise)
col = 8
over = {"logging_boost": {"column": col, "weight": w}}
if d == 0:
    cfg = F.trust_bias_config(200_000, **over); ests = ("vectorization", "affine", "ips", "naive", "dla")
else:
    cfg = F.vector_eh_config(F.vector_eh(d), 200_000, ranker=ranker, **over); ests = ("vectorization",) + F.SCALAR + ("labeled",)
t = time.time()
res = F.compare(qs, cfg, seeds, ests, log=print)
import numpy as np
print(json.dumps({e: float(np.mean(res[e])) for e in ests}), "time", time.time() - t)
json.dump(res, open(f"docs/results/fidelity_vector_eh/exploration/probe_w{w}_d{d}_n{noise}_{ranker}.json", "w"))
