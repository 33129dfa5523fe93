# Record of a one-off run (README "Offline fidelity"), kept with its output for traceability; run from the repo root
# with the venv active at the commit named in confounded.md. Not part of the package and not maintained.
import json, numpy as np
from ltrjax.offline import fidelity as F
from ltrjax.offline.experiment import _merge
tb = F.BEDS["confounded_mlp"]
qs = tb.queryset(600)
cfg = F.trust_bias_config(200_000, **{**tb.over(), "estimator_options": {"affine_clip_negative": False}})
res = F.compare(qs, cfg, range(100, 110), ("affine",), log=print)
json.dump(res, open("docs/results/fidelity_vector_eh/affine_clip/trust_bias_unclipped.json", "w"))
r = json.load(open("docs/results/fidelity_vector_eh/confounded_mlp.json"))["raw"]["trust_bias_d2"]
print("noclip", np.mean(res["affine"]), "clip", np.mean(r["affine"]), "vec", np.mean(r["vectorization"]))
print(F.paired_test(r["vectorization"], res["affine"]), F.equivalence_test(r["vectorization"], res["affine"], 0.01))
