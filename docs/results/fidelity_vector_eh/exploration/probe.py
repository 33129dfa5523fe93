# Record of a one-off run (README "Offline fidelity"), kept with its output for traceability; run from the repo root
# with the venv active at the commit named in confounded.md. Not part of the package and not maintained.
import sys, json, time
import numpy as np
from ltrjax.offline import fidelity as F
w = float(sys.argv[1]); grow_scale = float(sys.argv[2]); seeds = [int(x) for x in sys.argv[3].split(",")]
noise = float(sys.argv[4]); ranker = sys.argv[5]; tag = sys.argv[6]
m = F.vector_eh(3)
o = m.observation.copy(); o[:, 1] *= grow_scale / 0.15
m = F.VectorEH(relevance=m.relevance, observation=o)
assert m.matrix.max() <= 1
qs = F.basis_queryset(n_queries=300, noise=noise)
over = {"logging_boost": {"column": 8, "weight": w}} if w else {}
cfg = F.vector_eh_config(m, 200_000, ranker=ranker, **over); ests = ("vectorization",) + F.SCALAR + ("labeled",)
t = time.time()
res = F.compare(qs, cfg, seeds, ests, log=print)
print(tag, json.dumps({e: round(float(np.mean(res[e])), 4) for e in ests}), "time", round(time.time() - t))
json.dump(res, open(f"docs/results/fidelity_vector_eh/exploration/probe2_{tag}.json", "w"))
