"""Saved rankers: the final parameters of a run's algorithms, one msgpack file per algorithm and trial.

A file holds ``{"format", "meta", "params", "state"}`` written with ``flax.serialization``: ``meta``
(JSON) says how to rebuild the scorer — ``kind`` ``online`` (the algorithm's config, with its
``_target_`` policy class) or ``offline`` (estimator name, options, ranker) — and how the training
data's features were prepared (``features``: the kept original feature ids, the normalisation), so
``ltrjax.score`` can score any LETOR file the same way. Runs write them under ``RUN/models/NAME/trialT.msgpack``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import serialization

from ltrjax.record import writing

FORMAT = "ltrjax-model/1"


@dataclasses.dataclass(frozen=True)
class SavedModel:
    meta: dict
    params: Any  # nested dicts of arrays (flax state dict); ``restore`` shapes them like a template
    state: Any
    path: str = ""


def feature_spec(queryset) -> dict:
    """How a QuerySet's feature columns were made from the LETOR file (see ``ltrjax.data.preprocess``)."""
    ids = [int(i) for i in np.asarray(queryset.feature_ids)]
    bm25 = int(queryset.bm25_column)
    report = getattr(queryset, "preprocess_report", None)
    n_read = int(report.features_read) if report is not None else max(ids, default=0)
    return {"feature_ids": ids, "n_features": n_read,  # the width of the training files (feature ids 1..n)
            "normalize": str(queryset.info.get("normalize", "query_minmax")),
            "bm25_feature": ids[bm25] if bm25 >= 0 else None, "y_max": int(queryset.y_max),
            "dataset": str(queryset.name)}


def _host(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a), serialization.to_state_dict(jax.device_get(tree)))


def save_model(path, meta: dict, params, state=None) -> Path:
    """Write one model file (atomically); returns its path."""
    path = Path(path)
    payload = {"format": FORMAT, "meta": json.dumps(meta, default=_json_default), "params": _host(params),
               "state": _host(state) if state is not None else {}}
    tmp = path.with_suffix(path.suffix + ".tmp")
    with writing(path, tmp):  # a failed write: WriteError naming the model file, no temporary file left
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(serialization.msgpack_serialize(payload))
        os.replace(tmp, path)
    return path


def _json_default(x):
    if isinstance(x, (np.generic, np.ndarray, jax.Array)):
        return np.asarray(x).tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def load_model(path) -> SavedModel:
    """Read a model file; a file that is not one raises ValueError naming it."""
    path = os.fspath(path)
    try:
        payload = serialization.msgpack_restore(Path(path).read_bytes())
    except FileNotFoundError:
        raise
    except Exception as err:  # msgpack raises several unrelated types on foreign bytes
        raise ValueError(f"{path}: expected an ltrjax model file ({FORMAT}), could not decode it: {err}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path}: expected an ltrjax model file with format {FORMAT!r}, got {got!r}")
    return SavedModel(meta=json.loads(payload["meta"]), params=payload["params"], state=payload["state"], path=path)


def restore(template, raw):
    """``raw`` (a loaded state dict) in the structure of ``template`` (e.g. a fresh ``policy.init``)."""
    return serialization.from_state_dict(template, raw)


def model_path(out_dir, name: str, trial: int) -> Path:
    """``out_dir/models/NAME/trialT.msgpack`` (characters other than letters, digits, ``_.-`` become ``_``)."""
    return Path(out_dir) / "models" / re.sub(r"[^A-Za-z0-9_.-]", "_", name) / f"trial{trial}.msgpack"
