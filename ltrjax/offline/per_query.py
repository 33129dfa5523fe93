"""Per-query test results of offline runs (issue 42, item 3): ``per_query.parquet`` in the run folder, one row per
(query_id, trial, estimator, metric) with its value, and what results.json / results.md say of them: each metric's
ir_measures string, and the means per query group (Baidu-ULTR's ``frequency_bucket``).

``run_setting(..., per_query=True)`` leaves ``make_evaluator``'s per-query arrays in each result under
``"_per_query"``; ``take`` removes them (results.json keeps means only) and ``write`` replaces the trial's rows of
the file, so a resumed run keeps the rows of its finished trials.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ltrjax.offline.evaluate import METRIC_DEFINITIONS, ir_measure

FILE = "per_query.parquet"
SCHEMA = pa.schema([("query_id", pa.int64()), ("trial", pa.int32()), ("estimator", pa.string()),
                    ("metric", pa.string()), ("value", pa.float64())])


def take(res: dict) -> dict:
    """{estimator: per-query arrays} popped from a ``run_setting`` result (``per_query=True``)."""
    return {name: r.pop("_per_query") for name, r in res.items()
            if isinstance(r, dict) and "_per_query" in r}


def table(per_query: dict, qids: np.ndarray, trial: int) -> pa.Table:
    """The long table of one trial: a row per (query, estimator, metric)."""
    cols = {name: [] for name in SCHEMA.names}
    for name, arrays in per_query.items():
        q = np.asarray(qids, np.int64)[np.asarray(arrays["query_index"], np.int64)]
        for metric, values in arrays.items():
            if metric == "query_index":
                continue
            cols["query_id"].append(q)
            cols["value"].append(np.asarray(values, np.float64))
            cols["estimator"].append(np.full(q.size, name, object))
            cols["metric"].append(np.full(q.size, metric, object))
            cols["trial"].append(np.full(q.size, trial, np.int32))
    arrays = [pa.array(np.concatenate(cols[n]) if cols[n] else [], SCHEMA.field(n).type) for n in SCHEMA.names]
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def write(out_dir, new: pa.Table, trial: int) -> pathlib.Path:
    """Replace trial ``trial``'s rows of ``out_dir/per_query.parquet`` with ``new`` (atomically)."""
    path = pathlib.Path(out_dir) / FILE
    parts = [new]
    if path.exists():
        old = pq.read_table(path)
        parts.insert(0, old.filter(pc.not_equal(old.column("trial"), trial)))
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(pa.concat_tables(parts), tmp)
    os.replace(tmp, path)
    return path


def measures(metrics, map_threshold: int) -> dict:
    """{metric: {"ir_measures": string or None, "definition": ...}} of the run's metrics."""
    return {m: {"ir_measures": ir_measure(m, map_threshold), "definition": METRIC_DEFINITIONS[m.split("@")[0]]}
            for m in metrics}


def group_means(out_dir, groups: dict[int, int], metrics) -> dict:
    """{estimator: {group: {metric: mean over trials of the per-trial mean over the group's queries, "n_queries":
    queries of the group in a trial}}} from ``per_query.parquet``; ``groups``: query_id -> group."""
    path = pathlib.Path(out_dir) / FILE
    if not path.exists() or not groups:
        return {}
    t = pq.read_table(path)
    qid = t.column("query_id").to_numpy()
    keys = np.fromiter(groups.keys(), np.int64, len(groups))
    vals = np.fromiter(groups.values(), np.int64, len(groups))
    order = np.argsort(keys)
    pos = np.clip(np.searchsorted(keys[order], qid), 0, len(keys) - 1)
    known = keys[order][pos] == qid
    group = np.where(known, vals[order][pos], -1)
    cols = {n: np.asarray(t.column(n).to_pylist() if n in ("estimator", "metric") else t.column(n).to_numpy())
            for n in ("trial", "estimator", "metric", "value")}
    out: dict = {}
    for name in dict.fromkeys(cols["estimator"]):
        for g in np.unique(group[known]):
            rows = known & (group == g) & (cols["estimator"] == name)
            entry = {}
            for m in metrics:
                sel = rows & (cols["metric"] == m)
                trials = np.unique(cols["trial"][sel])
                if trials.size:
                    entry[m] = float(np.mean([cols["value"][sel & (cols["trial"] == tr)].mean() for tr in trials]))
                    entry["n_queries"] = int(np.count_nonzero(sel & (cols["trial"] == trials[0])))
            if entry:
                out.setdefault(str(name), {})[int(g)] = entry
    return out


def markdown_measures(measured: dict) -> str:
    lines = ["", "Metrics (test split; means over queries with a relevant document), as ir_measures names them "
             "on the evaluation labels:", ""]
    lines += [f"- `{m}`: " + (f"`{v['ir_measures']}`" if v["ir_measures"] else "no ir_measures measure")
              + f" ({v['definition']})" for m, v in measured.items()]
    return "\n".join(lines) + "\n"


def markdown_groups(grouped: dict, metrics, label: str = "frequency_bucket") -> str:
    """One table per estimator: a row per group, the metrics' means over trials."""
    if not grouped:
        return ""
    lines = ["", f"### Per {label}", ""]
    for name, groups in grouped.items():
        lines += [f"**{name}**", "", f"| {label} | queries | " + " | ".join(metrics) + " |",
                  "|---|---|" + "---|" * len(metrics)]
        for g in sorted(groups):
            row = groups[g]
            lines.append(f"| {g} | {row.get('n_queries', 0)} | "
                         + " | ".join(f"{row[m]:.4f}" if m in row else "-" for m in metrics) + " |")
        lines.append("")
    return "\n".join(lines)
