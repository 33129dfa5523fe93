"""Score a LETOR file with a saved ranker and write a TREC run file.

``python -m ltrjax.score RUN/models/NAME/trialT.msgpack FILE.txt --out run.txt [--tag NAME] [--qrels qrels.txt]``

The file's features are prepared as the model's training data was (the kept original feature ids,
per-query min-max normalisation); an online policy scores *cold* (no click statistics: its
``test_scores(..., warm=False)``). Each line of the output is ``qid Q0 docid rank score tag``, the
format trec_eval and ir_measures read, where ``docid`` is the line's ``#docid`` comment when the file has
them (MQ2007/MQ2008: the TREC Million Query ids, GX...), else the 0-based index of the document among its
query's lines in the file (the document ids of click logs); ranks break score ties by that index. A
malformed LETOR file or model file exits with status 2 and one line naming it; so does a file
whose features differ from the model's training files (``--allow-feature-mismatch`` scores it anyway,
absent features read as 0), an output folder that does not exist, an output that is an input (the model
or the LETOR file: nothing is overwritten), and a model that ranks cold documents
by nothing (an only-behaviour policy scores every document without clicks the same). A closed output
pipe (``| head``) ends the run quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import jax
import numpy as np

from ltrjax.data.errors import DataFormatError
from ltrjax.data.letor import read_letor
from ltrjax.data.preprocess import query_minmax_normalize
from ltrjax.data.queryset import TEST, QuerySet
from ltrjax.saved import SavedModel, load_model, restore


class ScoreError(ValueError):
    """A file, model or output the scorer refuses; ``str(e)`` is one paragraph (exit status 2)."""


def feature_mismatch(path, width: int, features: dict) -> str | None:
    """Why a LETOR file of ``width`` features (the largest feature id in it) cannot be scored by a model
    with ``features`` (its training files had ``n_features``, it reads ``feature_ids``), or None: the file
    must not have more features than the training files, nor lack one the model reads (a sparse file may
    leave out trailing features the model does not read)."""
    ids = [int(i) for i in features["feature_ids"]]
    trained = int(features.get("n_features") or max(ids, default=0))  # older model files: the largest kept id
    missing = [i for i in ids if i > width]
    if width <= trained and not missing:  # sparse files may omit trailing features the model does not read
        return None
    what = (f"the model reads {len(missing)} feature ids the file does not have ({_ids(missing)})" if missing
            else "its feature ids differ from the model's")
    return (f"{path} has {width} features, but the model was trained on files with {trained} features "
            f"(it reads {len(ids)} of them): {what}; score a file with the training data's features, or pass "
            "--allow-feature-mismatch to score it anyway (absent features read as 0, extra ones are ignored)")


def _ids(ids) -> str:
    return ", ".join(map(str, ids[:10])) + (f", ... ({len(ids)} in all)" if len(ids) > 10 else "")


def letor_queryset(path, features: dict, cache_dir=None, *, allow_feature_mismatch: bool = True) -> QuerySet:
    """A LETOR file as a QuerySet with the columns and normalisation of a model's ``features`` spec; a file
    whose feature count differs from the model's training files raises ``ScoreError`` unless
    ``allow_feature_mismatch``."""
    raw = read_letor(path, cache_dir=cache_dir)
    if not allow_feature_mismatch:
        problem = feature_mismatch(path, raw.features.shape[1], features)
        if problem:
            raise ScoreError(problem)
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
                    feature_ids=ids.astype(np.int32), info={"normalize": features.get("normalize")},
                    docids=raw.docids)


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


def check_cold_scores(model: SavedModel, qs: QuerySet, scores: np.ndarray) -> None:
    """``ScoreError`` when the model gives every document of every query with two or more documents the
    same score: it ranks cold documents (no clicks, all ``ltrjax.score`` sees) by nothing."""
    offsets = np.asarray(qs.query_offsets)
    long = np.flatnonzero(np.diff(offsets) > 1)
    if long.size == 0:
        return
    lo = np.minimum.reduceat(scores, offsets[:-1])[long]
    hi = np.maximum.reduceat(scores, offsets[:-1])[long]
    if (lo == hi).all():
        name = model.meta.get("algorithm") or model.meta.get("estimator")
        target = (model.meta.get("config") or {}).get("_target_", "")
        raise ScoreError(f"{model.path}: model {name} ({target.rsplit('.', 1)[-1] or model.meta.get('kind')}) scores "
                         f"every document of all {long.size} queries of {qs.name} the same: it cannot rank cold "
                         "documents (it ranks by click statistics, which a LETOR file does not have), so its run "
                         "file would be the file's order; score a model with a feature-based part instead")


def score_queryset(model: SavedModel, qs: QuerySet) -> np.ndarray:
    """float32 ``[N_docs]``: the model's score of every document of ``qs`` (flat QuerySet order)."""
    kind = model.meta.get("kind")
    if kind == "offline":
        return _offline_scores(model, qs)
    if kind == "online":
        return _online_scores(model, qs)
    raise ValueError(f"{model.path}: unknown model kind {kind!r}; expected 'online' or 'offline'")


def doc_name(qs: QuerySet, q: int, d: int) -> str:
    """The run-file id of document ``d`` of query ``q``: its ``#docid`` (MQ2007/MQ2008's GX... ids) when the file
    has one, else its 0-based index among the query's lines."""
    if qs.docids is not None:
        name = str(qs.docids[int(qs.query_offsets[q]) + int(d)])
        if name:
            return name
    return str(int(d))


def trec_lines(qs: QuerySet, scores: np.ndarray, tag: str):
    """``qid Q0 docid rank score tag`` lines, best first per query (ties: lower line index first)."""
    offsets = np.asarray(qs.query_offsets)
    for q in range(qs.n_queries):
        s = scores[offsets[q]:offsets[q + 1]]
        order = np.lexsort((np.arange(len(s)), -s.astype(np.float64)))
        for rank, d in enumerate(order, start=1):
            yield f"{int(qs.qids[q])} Q0 {doc_name(qs, q, d)} {rank} {float(s[d])!r} {tag}\n"


def qrels_lines(qs: QuerySet, exp_gain: bool = False):
    """``qid 0 docid relevance`` lines of the file's labels (``exp_gain``: 2^y - 1, ltrjax's NDCG gain)."""
    offsets = np.asarray(qs.query_offsets)
    for q in range(qs.n_queries):
        for d, y in enumerate(qs.labels[offsets[q]:offsets[q + 1]]):
            yield f"{int(qs.qids[q])} 0 {doc_name(qs, q, d)} {(2 ** int(y) - 1) if exp_gain else int(y)}\n"


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
    parser.add_argument("--allow-feature-mismatch", action="store_true",
                        help="score a file whose feature count differs from the model's training files "
                             "(absent features read as 0)")
    args = parser.parse_args(argv)
    try:
        _check_outputs(args)
        for out in (args.out, args.qrels):
            if out not in (None, "-"):
                _check_writable(out)
        model = load_model(args.model)
        qs = letor_queryset(args.letor, model.meta["features"], cache_dir=args.cache_dir,
                            allow_feature_mismatch=args.allow_feature_mismatch)
        scores = score_queryset(model, qs)
        check_cold_scores(model, qs, scores)
    except (DataFormatError, ValueError, FileNotFoundError, KeyError) as err:
        print(f"ltrjax.score: {err}", file=sys.stderr)
        return 2
    tag = args.tag or model.meta.get("algorithm") or model.meta.get("estimator") or "ltrjax"
    try:
        if args.qrels:
            _write_lines(Path(args.qrels), qrels_lines(qs, args.exp_gain))
        lines = trec_lines(qs, scores, tag)
        if args.out == "-":
            sys.stdout.writelines(lines)
            sys.stdout.flush()
        else:
            _write_lines(Path(args.out), lines)
            print(f"wrote {qs.n_docs} lines for {qs.n_queries} queries to {args.out}", file=sys.stderr)
    except BrokenPipeError:  # the reader closed the pipe (| head): what it read is what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)  # so that the interpreter's final flush cannot fail again
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as err:
        print(f"ltrjax.score: cannot write {err.filename or args.out}: {err.strerror or err}", file=sys.stderr)
        return 2
    return 0


def _write_lines(path: Path, lines) -> None:
    """``lines`` to ``path`` through a temporary file and a rename: a failed write leaves the old file and no
    temporary one (``OSError`` as before)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _check_outputs(args) -> None:
    """``ScoreError`` when ``--out`` or ``--qrels`` names an input (the model, the LETOR file) or each other: the
    run file would overwrite it."""
    inputs = {"the model": args.model, "the LETOR file": args.letor}
    outputs = {"--out": args.out, "--qrels": args.qrels}
    written = {flag: Path(p) for flag, p in outputs.items() if p not in (None, "-")}
    for flag, path in written.items():
        for what, source in inputs.items():
            if _same_file(path, Path(source)):
                raise ScoreError(f"{flag} {path} is {what} ({source}); writing the run file there would overwrite "
                                 f"it: choose another --out file. Nothing was written.")
    if len(written) == 2 and _same_file(written["--out"], written["--qrels"]):
        raise ScoreError(f"--out and --qrels are the same file ({args.out}); choose two files. Nothing was written.")


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def _check_writable(path: str) -> None:
    folder = Path(path).parent
    if not folder.is_dir():
        raise ScoreError(f"cannot write {path}: the folder {folder} does not exist (create it first)")
    if not os.access(folder, os.W_OK):
        raise ScoreError(f"cannot write {path}: the folder {folder} is not writable")


if __name__ == "__main__":
    sys.exit(main())
