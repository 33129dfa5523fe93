"""Merge the ``results.json`` of many runs (a Hydra multirun, several sweeps) into one table.

    python -m ltrjax.collect DIR [DIR ...] [--out OUTDIR] [--strict]

Every ``results.json`` under the DIRs (recursively) is one run: the online experiments'
(``{"dataset", ..., "algorithms": {name: {..., "trials": [{"seed", "cum_ndcg", ...}]}}}``) and the
offline experiment's (``{"dataset", ..., "algorithms": {estimator: {..., "trials": [{"ndcg@10",
"map", ...}]}}}``) alike. A run's overrides come from the nearest ``.hydra/overrides.yaml`` at or above
its folder (a multirun job's ``N/.hydra/``), one column per override key as Hydra recorded it
(``click_model``, ``+dataset``, ``trials``, ``~algorithms.ebrank``).

Writes into OUTDIR (default: the first DIR):

* ``results.csv``: one row per (run, algorithm): ``run`` (its folder, relative to the DIRs' common
  folder), the override columns, ``dataset``, ``algorithm``, ``n_trials``, and for every numeric
  per-trial field (``cum_ndcg``, ``warm_ndcg``, ``cold_ndcg``, ``cum_ndcg_vali``, ...; offline
  ``ndcg@k``, ``map``, ...) its ``_mean``, ``_std`` (sample std, ddof = 1; empty for one trial) and ``_n``,
  recomputed from the per-trial values (a null value, i.e. a non-finite one, makes the mean ``nan``).
* ``results.md``: the same rows as a Markdown table of the main metrics, with the overrides that vary.

A results.json that cannot be read is reported on stderr, naming the file and why, and left out
(``--strict``: exit 2 instead, writing nothing). Exit 2 when no results.json is found.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ltrjax.record import NotResultsFile, load_results

MAIN_METRICS = ("cum_ndcg", "warm_ndcg", "cold_ndcg", "cum_ndcg_vali", "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")
NOT_METRICS = {"seed"}


class ResultsError(ValueError):
    """A results.json (or its overrides.yaml) that cannot be merged."""


@dataclass
class Row:
    run: str
    overrides: dict[str, str]
    dataset: str
    algorithm: str
    n_trials: int
    values: dict[str, list[float]]  # metric -> its per-trial values (nan for null)


def natural_key(path: Path) -> list:
    """Sort ``10/`` after ``9/``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def find_results(dirs: list[Path]) -> list[tuple[Path, Path]]:
    """(results.json, the DIR it was found under), each file once: DIR by DIR, in natural order within one."""
    found: dict[Path, tuple[Path, Path]] = {}
    for root in dirs:
        for path in sorted(root.rglob("results.json"), key=natural_key):
            found.setdefault(path.resolve(), (path, root))
    return list(found.values())


def parse_override(text: str) -> tuple[str, str]:
    """``click_model=trust_bias`` -> (click_model, trust_bias); a deletion ``~key[=value]`` -> (~key, deleted)."""
    key, sep, value = str(text).partition("=")
    if key.startswith("~") and (not sep or value in ("", "null")):
        return key, "deleted"
    return key, value


def read_overrides(run_dir: Path, root: Path) -> dict[str, str]:
    """The overrides of the nearest ``.hydra/overrides.yaml`` in ``run_dir`` or above it, up to ``root``."""
    from omegaconf import OmegaConf

    root = root.resolve()
    for folder in (run_dir.resolve(), *run_dir.resolve().parents):
        path = folder / ".hydra" / "overrides.yaml"
        if path.is_file():
            try:
                items = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            except Exception as err:  # noqa: BLE001 - any YAML or I/O problem is reported with the file
                raise ResultsError(f"{path}: cannot be read ({type(err).__name__}: {err})") from err
            if not isinstance(items, list):
                raise ResultsError(f"{path}: expected a YAML list of overrides, found {type(items).__name__}")
            return dict(parse_override(item) for item in items)
        if folder == root or root not in folder.parents:
            break
    return {}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _trial_values(trials: list, name: str) -> dict[str, list[float]]:
    """Every field that is a number in some trial record of algorithm ``name``: its values (null -> nan)."""
    for i, trial in enumerate(trials):
        if not isinstance(trial, dict):
            raise ResultsError(f"algorithm {name!r}: trial {i} is a {type(trial).__name__}, not an object")
    metrics = dict.fromkeys(k for t in trials for k, v in t.items() if _is_number(v) and k not in NOT_METRICS)
    values: dict[str, list[float]] = {}
    for metric in metrics:
        values[metric] = []
        for i, trial in enumerate(trials):
            if metric not in trial:
                continue
            value = trial[metric]
            if value is not None and not _is_number(value):
                raise ResultsError(f"algorithm {name!r}, trial {i}: {metric!r} is {value!r}, not a number")
            values[metric].append(math.nan if value is None else float(value))
    return values


def load_rows(path: Path, run: str, overrides: dict[str, str]) -> list[Row]:
    """The rows of one results.json; raises ResultsError saying what is wrong with it."""
    try:
        data = load_results(path)
    except OSError as err:
        raise ResultsError(f"cannot be read ({err})") from err
    except NotResultsFile as err:
        raise ResultsError(str(err)) from err
    if not isinstance(data.get("algorithms"), dict):
        raise ResultsError('no "algorithms" object at the top level')
    rows = []
    for name, entry in data["algorithms"].items():
        trials = entry.get("trials") if isinstance(entry, dict) else None
        if not isinstance(trials, list) or not trials:
            raise ResultsError(f'algorithm {name!r} has no per-trial list "trials"')
        rows.append(Row(run, overrides, str(data.get("dataset", "")), name, len(trials), _trial_values(trials, name)))
    if not rows:
        raise ResultsError('"algorithms" is empty')
    return rows


def summary(values: list[float]) -> tuple[float, float | None, int]:
    """(mean, sample std or None for one value, n)."""
    x = np.asarray(values, np.float64)
    return float(x.mean()), (float(x.std(ddof=1)) if len(x) > 1 else None), len(x)


def _columns(rows: list[Row]) -> tuple[list[str], list[str]]:
    """(override keys, metrics), each in first-seen order; the main metrics first."""
    keys = list(dict.fromkeys(k for row in rows for k in row.overrides))
    seen = list(dict.fromkeys(m for row in rows for m in row.values))
    metrics = [m for m in MAIN_METRICS if m in seen] + [m for m in seen if m not in MAIN_METRICS]
    return keys, metrics


def write_csv(rows: list[Row], path: Path) -> None:
    keys, metrics = _columns(rows)
    header = ["run", *keys, "dataset", "algorithm", "n_trials"]
    header += [f"{m}_{stat}" for m in metrics for stat in ("mean", "std", "n")]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        for row in rows:
            cells = [row.run, *(row.overrides.get(k, "") for k in keys), row.dataset, row.algorithm, row.n_trials]
            for m in metrics:
                if m in row.values:
                    mean, std, n = summary(row.values[m])
                    cells += [repr(mean), "" if std is None else repr(std), n]
                else:
                    cells += ["", "", 0]
            writer.writerow(cells)


def _cell(row: Row, metric: str) -> str:
    if metric not in row.values:
        return ""
    mean, std, n = summary(row.values[metric])
    fmt = "{:.2f}" if abs(mean) >= 10 else "{:.4f}"  # as the runs' own results.md
    text = fmt.format(mean) + ("" if std is None else " ± " + fmt.format(std))
    return text + ("" if n == row.n_trials else f" (n={n})")


def _md(text: object) -> str:
    return str(text).replace("|", "\\|")


def markdown(rows: list[Row], sources: list[str], skipped: list[str] = ()) -> str:
    keys, metrics = _columns(rows)
    shown = [m for m in metrics if m in MAIN_METRICS] or metrics
    varying = [k for k in keys if len({row.overrides.get(k) for row in rows}) > 1]
    common = [f"`{k}`" if k.startswith("~") else f"`{k}={rows[0].overrides[k]}`" for k in keys if k not in varying]
    n_runs = len({row.run for row in rows})
    lines = [f"# Collected results: {n_runs} runs, {len(rows)} rows", "",
             f"From {', '.join(sources)}. Mean ± std over trials; the online metrics are of test-split "
             "sessions except `cum_ndcg_vali` (validation split: the tuning objective). "
             "Every per-trial metric, with its trial count, is in results.csv."]
    if common:
        lines.append("Overrides of every run: " + " ".join(_md(c) for c in common) + ".")
    header = ["run", *varying, "dataset", "algorithm", *shown, "n_trials"]
    lines += ["", "| " + " | ".join(_md(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row.run, *(row.overrides.get(k, "") for k in varying), row.dataset, row.algorithm,
                 *(_cell(row, m) for m in shown), row.n_trials]
        lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
    if skipped:
        lines += ["", f"Left out, unreadable ({len(skipped)}):", "", *(f"* {_md(s)}" for s in skipped)]
    return "\n".join(lines) + "\n"


def collect(files: list[tuple[Path, Path]], base: Path) -> tuple[list[Row], list[str]]:
    """(the rows of every readable file of ``find_results``, one message per skipped file); ``run`` is
    each file's folder relative to ``base``."""
    rows, skipped = [], []
    for path, root in files:
        run = path.parent.resolve().relative_to(base).as_posix()
        try:
            rows += load_rows(path, run, read_overrides(path.parent, root))
        except ResultsError as error:
            skipped.append(f"{path}: {error}")
            print(f"ltrjax.collect: skipped {skipped[-1]}", file=sys.stderr)
    return rows, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ltrjax.collect", description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="folders searched for results.json")
    parser.add_argument("--out", type=Path, help="where results.csv and results.md go (default: the first DIR)")
    parser.add_argument("--strict", action="store_true", help="exit 2 if any results.json cannot be merged")
    args = parser.parse_args(argv)

    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"ltrjax.collect: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    files = find_results(args.dirs)
    if not files:
        print(f"ltrjax.collect: no results.json under {', '.join(map(str, args.dirs))}", file=sys.stderr)
        return 2
    rows, skipped = collect(files, Path(os.path.commonpath([d.resolve() for d in args.dirs])))
    if skipped and args.strict:
        print(f"ltrjax.collect: {len(skipped)} results.json could not be merged (--strict): nothing written",
              file=sys.stderr)
        return 2
    if not rows:
        print("ltrjax.collect: no results.json could be merged (see above)", file=sys.stderr)
        return 2
    out = args.out or args.dirs[0]
    if (out / "results.json").exists():
        print(f"ltrjax.collect: {out} is a run's own folder (it has a results.json) and its results.md would be "
              "overwritten; pass --out OUTDIR", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "results.csv")
    (out / "results.md").write_text(markdown(rows, [str(d) for d in args.dirs], skipped))
    n_runs = len({row.run for row in rows})
    print(f"merged {n_runs} runs ({len(rows)} rows) into {out / 'results.csv'} and {out / 'results.md'}"
          + (f"; skipped {len(skipped)} (see above)" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
