"""Results files of an online run: ``results.json`` rewritten atomically after every finished trial (through
``ltrjax.record``, the one reader/writer of results files), ``results.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ltrjax.record import (RESULTS, ROW_IGNORED, atomic_write, differences, jsonable, protocol_of, read_results,
                           refusal, write_results)

__all__ = ["ResultsWriter", "atomic_write", "same_protocol"]


def same_protocol(key: str, a: Any, b: Any) -> bool:
    """Whether two results headers' ``key`` values describe the same protocol: ``sim`` blocks are compared
    without the keys that change only what is evaluated along the way or how fast (``ltrjax.record.REPORTING_KEYS``,
    ``PERFORMANCE_KEYS``)."""
    if key == "sim":
        return protocol_of(a) == protocol_of(b)
    return a == b


class ResultsWriter:
    """Accumulates per-trial records per algorithm; means are recomputed at every write."""

    def __init__(self, out_dir: Path, header: dict, metrics: tuple[str, ...], settings: dict[str, dict] | None = None):
        """``settings``: {row name: the fully resolved settings that make it}, stored with each row and compared on
        ``resume`` (``ltrjax.runner.row_settings``)."""
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.header = dict(header)
        self.metrics = metrics
        self.settings = dict(settings or {})
        self.algorithms: dict[str, dict] = {}

    def resume(self, keys: tuple[str, ...] = ("dataset", "sessions", "queries", "sim", "click_model")) -> int:
        """Load the trials already in ``results.json`` of the output directory (an interrupted run).

        Refuses (``RunFolderError``) a file written for another dataset or protocol (header ``keys``), and a row of
        this run whose stored settings differ from this run's (or that has none: written before ltrjax recorded
        them); returns the number of trials loaded.
        """
        old = read_results(self.out_dir)
        if old is None:
            return 0
        path = self.out_dir / RESULTS
        diffs = []
        for key in keys:
            if key in old and not same_protocol(key, jsonable(self.header.get(key)), old[key]):
                mine = jsonable(self.header.get(key))
                if key == "sim":
                    diffs += differences({"sim": protocol_of(old[key])}, {"sim": protocol_of(mine)})
                else:
                    diffs += differences({key: old[key]}, {key: mine})
        for name, entry in (old.get("algorithms") or {}).items():
            if name not in self.settings or not entry.get("trials"):
                continue
            saved = entry.get("settings")
            if not isinstance(saved, dict):
                diffs.append(("settings", "<not recorded>", "<this run's>", name))
                continue
            diffs += [(k, o, n, name) for k, o, n in differences(saved, self.settings[name], ROW_IGNORED)]
        if diffs:
            raise refusal(path, "finished rows", diffs)
        self.algorithms = {name: entry for name, entry in old.get("algorithms", {}).items()}
        return sum(len(entry.get("trials", [])) for entry in self.algorithms.values())

    def has_trial(self, name: str, seed: int) -> bool:
        return any(t.get("seed") == seed for t in self.algorithms.get(name, {}).get("trials", []))

    def add_trial(self, name: str, record: dict) -> None:
        entry = self.algorithms.setdefault(name, {"trials": []})
        if name in self.settings:
            entry["settings"] = self.settings[name]
        entry["trials"].append(record)
        for m in self.metrics:
            values = np.array([t[m] for t in entry["trials"]], np.float64)
            entry[m] = float(values.mean())
            entry[f"{m}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        self.write()

    def as_dict(self) -> dict:
        return jsonable({**self.header, "algorithms": self.algorithms})

    def write(self) -> None:
        write_results(self.out_dir, self.as_dict())

    def write_markdown(self, title: str, labels: dict[str, str], extra: str = "", summary: str = "") -> str:
        """``results.md``: ``# title``, then ``summary`` (what the run was), the table (mean ± std over trials; one
        trial: its value) and ``extra``."""
        from ltrjax.report.tables import mean_cell

        rows = [f"# {title}", ""] + ([summary, ""] if summary else [])
        rows += ["| algorithm | " + " | ".join(labels[m] for m in self.metrics) + " | trials |",
                 "|---|" + "---|" * (len(self.metrics) + 1)]
        for name, entry in self.algorithms.items():
            cells = []
            for m in self.metrics:
                values = np.asarray([t[m] for t in entry["trials"]], np.float64)
                fmt = "{:.2f}" if abs(entry[m]) >= 10 else "{:.4f}"
                cells.append(mean_cell(values, fmt.format))
            rows.append(f"| {name} | " + " | ".join(cells) + f" | {len(entry['trials'])} |")
        text = "\n".join(rows) + "\n" + (("\n" + extra + "\n") if extra else "")
        atomic_write(self.out_dir / "results.md", text)
        return text
