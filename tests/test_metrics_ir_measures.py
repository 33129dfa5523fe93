"""The offline metrics against ir_measures (issue 42, item 3): on a generated run and qrels, every per-query value
ltrjax computes equals what ir_measures computes for the string ``ltrjax.offline.evaluate.ir_measure`` records
(1e-6). Two of those strings are served by gdeval, which prints 5 decimals: nDCG(dcg='exp-log2')@k and ERR@k are
checked to that rounding (6e-6), and nDCG also to 1e-6 as pytrec_eval's nDCG@k on qrels of relevance 2^y - 1 (the
same measure: linear gain of the exponential gains). DCG, which ir_measures lacks, is that nDCG times the ideal DCG
of the qrels (NumPy)."""

import numpy as np
import pytest

ir_measures = pytest.importorskip("ir_measures")

from ltrjax.offline.evaluate import KS, ir_measure, query_metrics  # noqa: E402


def generated_run(seed=0, n_queries=40):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 26, n_queries)  # some lists shorter than 10: P@10 still divides by 10
    width = int(sizes.max())
    mask = np.arange(width)[None, :] < sizes[:, None]
    labels = np.where(mask, rng.choice(5, (n_queries, width), p=[0.5, 0.2, 0.15, 0.1, 0.05]), 0).astype(np.int32)
    scores = np.where(mask, rng.normal(size=(n_queries, width)), 0.0).astype(np.float32)  # no ties
    qrels = [ir_measures.Qrel(str(q), f"d{d}", int(labels[q, d])) for q in range(n_queries) for d in range(sizes[q])]
    run = [ir_measures.ScoredDoc(str(q), f"d{d}", float(scores[q, d]))
           for q in range(n_queries) for d in range(sizes[q])]
    return scores, labels, mask, qrels, run


def ideal_dcg(labels_q, k):
    g = np.sort(2.0 ** labels_q - 1.0)[::-1][:k]
    return float(np.sum(g / np.log2(np.arange(2, g.size + 2))))


@pytest.mark.parametrize("threshold", [1, 2])
def test_every_offline_metric_equals_ir_measures(threshold):
    scores, labels, mask, qrels, run = generated_run(seed=threshold)
    ours = {k: np.asarray(v) for k, v in query_metrics(scores, labels, mask, KS, threshold).items()}
    has = ours.pop("has_relevant")
    assert has.sum() >= 30
    measures = {m: ir_measures.parse_measure(ir_measure(m, threshold)) for m in ours if ir_measure(m, threshold)}
    assert ir_measure("p@10", threshold) == ("P@10" if threshold == 1 else "P(rel=2)@10")
    theirs = {}
    for r in ir_measures.iter_calc(list(measures.values()), qrels, run):
        theirs[(str(r.measure), int(r.query_id))] = r.value
    exp_qrels = [ir_measures.Qrel(r.query_id, r.doc_id, 2 ** r.relevance - 1) for r in qrels]
    linear = [ir_measures.parse_measure(f"nDCG@{k}") for k in KS]
    for r in ir_measures.pytrec_eval.iter_calc(linear, exp_qrels, run):
        theirs[("exp-gain " + str(r.measure), int(r.query_id))] = r.value
    checked = 0
    for q in np.flatnonzero(has):
        for metric, value in ours.items():
            name, _, k = metric.partition("@")
            if name in ("ndcg", "dcg"):
                ndcg = theirs[(f"exp-gain nDCG@{k}", q)]
                want = ndcg * (ideal_dcg(labels[q][mask[q]], int(k)) if name == "dcg" else 1.0)
                assert value[q] == pytest.approx(want, abs=1e-6, rel=1e-6), (metric, q, value[q], want)
                if name == "ndcg":  # the recorded string itself (gdeval: 5 decimals)
                    assert abs(value[q] - theirs[(str(measures[metric]), q)]) <= 6e-6, (metric, q)
            else:
                want = theirs.get((str(measures[metric]), q), 0.0)  # a measure left out of a query is 0
                tol = 6e-6 if name == "err" else 1e-6
                assert abs(value[q] - want) <= tol, (metric, q, value[q], want)
            checked += 1
    assert checked == int(has.sum()) * len(ours) and len(ours) == 5 * len(KS) + 1
