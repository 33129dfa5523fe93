"""Vectorization collapse on Yahoo!-shaped nonlinear synthetic data (trust bias): python collapse_diag.py SEED DIMS (e.g. 1 5,2).
Prints per d the training loss around the end of the freeze (epochs 45-60) and the count of non-finite epochs; writes
/tmp/h11/diag_SEED.json (test NDCG@10 by the base vector and by mean_k o_k, the validation history)."""
import json, sys, time
import numpy as np, jax, jax.numpy as jnp
from omegaconf import OmegaConf
from ltrjax.offline import experiment as E, fidelity as F, fidelity_experiment as FE
from ltrjax.offline.estimators import make_estimator
from ltrjax.offline.evaluate import make_evaluator, make_validator
from ltrjax.schema import conf_dir

ds = OmegaConf.load(conf_dir() / "dataset" / "synthetic_yahoo.yaml"); ds.n_queries = 1000; ds.nonlinear = 0.5
cfg = OmegaConf.create({"dataset": ds, "experiment": {}})
fx = FE.fidelity_config(OmegaConf.create({"experiment": {"kind": "offline_fidelity"}}))
qs = E.load_queryset(cfg, {"seed": 0})
s = FE.VEC_SETTINGS["trust_bias"]
over = {"click_model": s["click_model"], "eval": {"binarize": False},
        "estimator_options": {"naive_form": "listwise", "ips_form": "listwise"},
        "train_overrides": {"vectorization": {"eval_every": 25}}}
exp = FE._base(fx, "mlp", **over)
seed = int(sys.argv[1]); dims = [int(x) for x in sys.argv[2].split(",")]
trial = E.prepare_trial(qs, exp, seed)
out = {}
for d in dims:
    ed = E._merge(exp, {"estimator_options": {"vec_dim": d}})
    fits = {}
    res = E.run_setting(trial, ed, estimators=["vectorization"], log=lambda *a: None,
                        on_fit=lambda n, est, fr: fits.__setitem__(n, fr))
    fr = fits["vectorization"]
    mean_o = F.mean_observation_ndcg(trial, ed, fr)
    o = np.asarray(fr.params["observation"])
    out[d] = {"ndcg_base_vector": res["vectorization"]["ndcg@10"], "ndcg_mean_o": mean_o,
              "best_epoch": fr.history["best_epoch"], "epochs": fr.history["epochs"],
              "vali": [round(v, 4) for v in fr.history["vali"]], "o_first_col": o[:, 0].round(3).tolist(),
              "o_sv": np.linalg.svd(o, compute_uv=False).round(3).tolist()}
    L = fr.history["loss"]; print(d, "loss 45-60", [round(x, 4) for x in L[44:60]], "n_nan", int(np.sum(~np.isfinite(L))), "n_batches", fr.history.get("n_batches"), flush=True)
json.dump(out, open(f"/tmp/h11/diag_{seed}.json", "w"), indent=1)
