"""Score a LETOR file with a saved ranker and write a TREC run file.

``python -m ltrjax.score RUN/models/NAME/trialT.msgpack FILE.txt --out run.txt [--tag NAME] [--qrels qrels.txt]``

The file's features are prepared as the model's training data was (the kept original feature ids,
per-query min-max normalisation); an online policy scores *cold* (no click statistics: its
``test_scores(..., warm=False)``). Each line of the output is ``qid Q0 docid rank score tag``, the
format trec_eval and ir_measures read, where ``docid`` is the 0-based index of the document among
its query's lines in the file (the document ids of click logs) and ranks break score ties by that
index. A malformed LETOR file or model file exits with status 2 and one line naming it.
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from ltrjax.data.errors import DataFormatError
from ltrjax.data.letor import read_letor
from ltrjax.data.preprocess import query_minmax_normalize
from ltrjax.data.queryset import TEST, QuerySet
from ltrjax.saved import SavedModel, load_model, restore


def letor_queryset(path, features: dict, cache_dir=None) -> QuerySet:
    """A LETOR file as a QuerySet with the columns and normalisation of a model's ``features`` spec."""
    raw = read_letor(path, cache_dir=cache_dir)
    ids = np.asarray(features["feature_ids"], np.int64)
    x = np.zeros((raw.features.shape[0], len(ids)), np.float32)
    present = ids <= raw.features.shape[1]  # sparse files may omit trailing all-zero features
    x[:, present] = raw.features[:, ids[present] - 1]
    if features.get("normalize", "query_minmax") == "query_minmax":
        x = query_minmax_normalize(x, raw.query_offsets)
    bm25 = features.get("bm25_feature")
    bm25_column = int(np.flatnonzero(ids == bm25)[0]) if bm25 is not None and bm25 in ids else -1
    y_max = max(int(features.get("y_max", 0)), int(raw.labels.max(initial=0)))
    return QuerySet(name=str(path), features=x, labels=raw.labels, query_offsets=raw.query_offsets, qids=raw.qids,
                    split=np.full(raw.n_queries, TEST, np.int8), y_max=y_max, bm25_column=bm25_column,
                    feature_ids=ids.astype(np.int32), info={"normalize": features.get("normalize")})


def _offline_scores(model: SavedModel, qs: QuerySet) -> np.ndarray:
    from ltrjax.offline.estimators import estimator_option_defaults, make_estimator, options_from_flat
    from ltrjax.offline.lists import bucket_queries

    meta = model.meta
    ranker = meta.get("ranker", "linear")
    opts = dict(meta.get("options") or {})
    if not set(opts) <= {*estimator_option_defaults(meta["estimator"]), "gbdt"}:  # a model saved with flat options
        opts = options_from_flat(meta["estimator"], opts, ranker)
    if ranker != "lambdamart":
        opts.pop("gbdt", None)
    opts = {k: tuple(v) if isinstance(v, list) else v for k, v in opts.items()}
    est = make_estimator(meta["estimator"], ranker=ranker, hidden=tuple(meta.get("hidden") or (64, 32)), **opts)
    score = jax.jit(est.score)
    out = np.zeros(qs.n_docs, np.float32)
    for lists in bucket_queries(qs, np.arange(qs.n_queries), np.random.default_rng(0), n_buckets=4):
        s = np.asarray(score(model.params, model.state, lists.features, lists.mask))
        mask = np.asarray(lists.mask)
        out[np.asarray(lists.doc_index)[mask]] = s[mask]
    return out


def online_policy(model: SavedModel, data):
    """The policy of a saved online model, its parameters restored on a fresh ``init`` of ``data``."""
    from omegaconf import OmegaConf

    from ltrjax.runner import make_policy

    meta = model.meta
    policy, _ = make_policy(meta["algorithm"], OmegaConf.create(meta["config"]), data, None, meta.get("key"))
    params = restore(policy.init(jax.random.PRNGKey(0), data), model.params)
    return policy, params


def _online_scores(model: SavedModel, qs: QuerySet) -> np.ndarray:
    from ltrjax.data.layout import pad_and_bucket
    from ltrjax.online.state import DocCounters

    data = pad_and_bucket(qs)
    policy, params = online_policy(model, data)
    cold = jax.jit(lambda p, b: policy.test_scores(p, b, DocCounters.zeros(b.labels.shape), False))
    out = np.zeros(qs.n_docs, np.float32)
    offsets = np.asarray(qs.query_offsets)
    for bucket in data.buckets:
        s = np.asarray(cold(params, bucket))
        mask = np.asarray(bucket.doc_mask)
        rows = offsets[np.asarray(bucket.query_index)][:, None] + np.arange(bucket.width)[None, :]
        out[rows[mask]] = s[mask]
    return out


def score_queryset(model: SavedModel, qs: QuerySet) -> np.ndarray:
    """float32 ``[N_docs]``: the model's score of every document of ``qs`` (flat QuerySet order)."""
    kind = model.meta.get("kind")
    if kind == "offline":
        return _offline_scores(model, qs)
    if kind == "online":
        return _online_scores(model, qs)
    raise ValueError(f"{model.path}: unknown model kind {kind!r}; expected 'online' or 'offline'")


def trec_lines(qs: QuerySet, scores: np.ndarray, tag: str):
    """``qid Q0 docid rank score tag`` lines, best first per query (ties: lower docid first)."""
    offsets = np.asarray(qs.query_offsets)
    for q in range(qs.n_queries):
        s = scores[offsets[q]:offsets[q + 1]]
        order = np.lexsort((np.arange(len(s)), -s.astype(np.float64)))
        for rank, d in enumerate(order, start=1):
            yield f"{int(qs.qids[q])} Q0 {int(d)} {rank} {float(s[d])!r} {tag}\n"


def qrels_lines(qs: QuerySet, exp_gain: bool = False):
    """``qid 0 docid relevance`` lines of the file's labels (``exp_gain``: 2^y - 1, ltrjax's NDCG gain)."""
    offsets = np.asarray(qs.query_offsets)
    for q in range(qs.n_queries):
        for d, y in enumerate(qs.labels[offsets[q]:offsets[q + 1]]):
            yield f"{int(qs.qids[q])} 0 {d} {(2 ** int(y) - 1) if exp_gain else int(y)}\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ltrjax.score", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a saved model: RUN/models/NAME/trialT.msgpack")
    parser.add_argument("letor", help="a LETOR/SVMlight file (plain or gzip)")
    parser.add_argument("--out", default="-", help="the TREC run file to write (default: stdout)")
    parser.add_argument("--tag", default=None, help="the run tag (default: the model's algorithm name)")
    parser.add_argument("--cache-dir", default=None, help="parsed-LETOR cache folder")
    parser.add_argument("--qrels", default=None, help="also write the file's labels as TREC qrels (same docids)")
    parser.add_argument("--exp-gain", action="store_true",
                        help="qrels relevance 2^label - 1, the gain of ltrjax's NDCG (trec_eval's gain is the relevance)")
    args = parser.parse_args(argv)
    try:
        model = load_model(args.model)
        qs = letor_queryset(args.letor, model.meta["features"], cache_dir=args.cache_dir)
    except (DataFormatError, ValueError, FileNotFoundError, KeyError) as err:
        print(f"ltrjax.score: {err}", file=sys.stderr)
        return 2
    if args.qrels:
        with open(args.qrels, "w") as f:
            f.writelines(qrels_lines(qs, args.exp_gain))
    scores = score_queryset(model, qs)
    tag = args.tag or model.meta.get("algorithm") or model.meta.get("estimator") or "ltrjax"
    lines = trec_lines(qs, scores, tag)
    if args.out == "-":
        sys.stdout.writelines(lines)
    else:
        with open(args.out, "w") as f:
            f.writelines(lines)
        print(f"wrote {qs.n_docs} lines for {qs.n_queries} queries to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
