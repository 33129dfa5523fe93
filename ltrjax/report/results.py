"""Results files: ``results.json`` rewritten atomically after every finished trial, ``results.md``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return _clean(value.tolist())
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def same_protocol(key: str, a: Any, b: Any) -> bool:
    """Whether two results headers' ``key`` values describe the same protocol: ``sim`` blocks are compared
    without the keys that change only what is evaluated along the way (``simulator.REPORTING_KEYS``)."""
    if key == "sim":
        from ltrjax.online.simulator import protocol_of  # JAX only where a sim block is compared

        return protocol_of(a) == protocol_of(b)
    return a == b


class ResultsWriter:
    """Accumulates per-trial records per algorithm; means are recomputed at every write."""

    def __init__(self, out_dir: Path, header: dict, metrics: tuple[str, ...]):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.header = dict(header)
        self.metrics = metrics
        self.algorithms: dict[str, dict] = {}

    def resume(self, keys: tuple[str, ...] = ("dataset", "sessions", "queries", "sim", "click_model")) -> int:
        """Load the trials already in ``results.json`` of the output directory (an interrupted run).

        Refuses a file written for another dataset or protocol; returns the number of trials loaded.
        """
        path = self.out_dir / "results.json"
        if not path.exists():
            return 0
        try:
            old = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err}); move it away to start afresh") from err
        for key in keys:
            if key in old and not same_protocol(key, _clean(self.header.get(key)), old[key]):
                raise ValueError(f"{path} was written for {key} = {old[key]!r} but this run has "
                                 f"{_clean(self.header.get(key))!r}; use another output directory")
        self.algorithms = {name: entry for name, entry in old.get("algorithms", {}).items()}
        return sum(len(entry.get("trials", [])) for entry in self.algorithms.values())

    def has_trial(self, name: str, seed: int) -> bool:
        return any(t.get("seed") == seed for t in self.algorithms.get(name, {}).get("trials", []))

    def add_trial(self, name: str, record: dict) -> None:
        entry = self.algorithms.setdefault(name, {"trials": []})
        entry["trials"].append(record)
        for m in self.metrics:
            values = np.array([t[m] for t in entry["trials"]], np.float64)
            entry[m] = float(values.mean())
            entry[f"{m}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        self.write()

    def as_dict(self) -> dict:
        return _clean({**self.header, "algorithms": self.algorithms})

    def write(self) -> None:
        atomic_write(self.out_dir / "results.json", json.dumps(self.as_dict(), indent=1))

    def write_markdown(self, title: str, labels: dict[str, str], extra: str = "") -> str:
        rows = [f"# {title}", "", "| algorithm | " + " | ".join(labels[m] for m in self.metrics) + " | trials |",
                "|---|" + "---|" * (len(self.metrics) + 1)]
        for name, entry in self.algorithms.items():
            cells = []
            for m in self.metrics:
                fmt = "{:.2f}" if abs(entry[m]) >= 10 else "{:.4f}"
                cells.append(f"{fmt.format(entry[m])} ± {fmt.format(entry[m + '_std'])}")
            rows.append(f"| {name} | " + " | ".join(cells) + f" | {len(entry['trials'])} |")
        text = "\n".join(rows) + "\n" + (("\n" + extra + "\n") if extra else "")
        atomic_write(self.out_dir / "results.md", text)
        return text
