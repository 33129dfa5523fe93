"""PRS Table 1's analogue on real MQ2008 with the paper's comparator: PRS-LambdaMART (``prs_lambda``, told theta
estimated by result randomization) against Unbiased LambdaMART (``pair_debias_lambda``, t+/t- learned from the clicks
with the trees), ``ips_lambda`` (IPS-LambdaMART told the same theta) as the extra column; the protocol's defaults
(``experiment=offline_fidelity +dataset=mq2008``: 10 paired trials, whole lists, 126 clicks per logged query, eta = 1,
mu = .1, LambdaMART trees, 100 rounds), only this part (``ltrjax.offline.fidelity_experiment.prs_table1``).

    python docs/results/prs_table1_unbiased_lambdamart/run.py OUT_DIR [TRIALS]
"""
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from benchlib import load_run  # noqa: E402

from ltrjax.offline import fidelity as F  # noqa: E402
from ltrjax.offline import fidelity_experiment as FE  # noqa: E402
from ltrjax.offline.config import override  # noqa: E402
from ltrjax.offline_runner import load_queryset  # noqa: E402

out = Path(sys.argv[1])
run = load_run(["experiment=offline_fidelity", "+dataset=mq2008"])
fx = run.experiment
if len(sys.argv) > 2:
    fx = override(fx, {"trials": int(sys.argv[2])})
qs = load_queryset(run.dataset, run.data.cache_dir, seed=run.seed)
px = fx.prs
# prs_part's exp0 (the table's setting), as ltrjax.offline_runner passes it to prs_table1
exp0 = FE.base_offline(fx, px.ranker, list_size=None, clicks_per_query=px.clicks_per_query,
                       train={"max_steps": px.max_steps},
                       click_model={"kind": "pbm", "examination": "inverse", "eta": 1.0, "relevance": "binary",
                                    "noise": float(px.noise[0])})
t0 = time.time()
t1 = FE.prs_table1(qs, fx, exp0, log=lambda m: print(m, flush=True))
test = F.paired_test(t1["table"]["prs_lambda"], t1["table"]["pair_debias_lambda"])
extra = F.paired_test(t1["table"]["prs_lambda"], t1["table"]["ips_lambda"])
res = {"table": t1["table"], "training": t1["training"], "prs_lambda_gt_unbiased_lambdamart": test,
       "prs_lambda_gt_ips_lambda (no claim)": extra, "trials": int(fx.trials), "seconds": time.time() - t0,
       "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip(),
       "command": "python docs/results/prs_table1_unbiased_lambdamart/run.py " + " ".join(sys.argv[1:])}
out.mkdir(parents=True, exist_ok=True)
(out / "results.json").write_text(json.dumps(res, indent=1, default=float))
print(json.dumps({k: v for k, v in res.items() if k not in ("table", "training")}, indent=1, default=float))
