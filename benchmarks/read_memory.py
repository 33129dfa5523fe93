"""Peak memory of reading Baidu-ULTR click parts (issue 42): generated Feather files of about ``--size-mb``, read by
``ltrjax.data.baidu_ultr.read_baidu_ultr`` in a fresh child process, whose peak resident memory above its
resident memory after the imports is compared with the stated budget:

    budget = 256 MiB + 400 bytes x distinct documents

(256 MiB: one stored record batch of the used columns, the per-batch key lists and pyarrow's pools; 400 bytes a
document: its 12 float32 features, its key in the document table and its query and rank). The generated parts
hold every column of the release, the 768-float16 embedding included, which the reader leaves on disk.

    python benchmarks/read_memory.py                 # about 2 GB of parts
    python benchmarks/read_memory.py --smoke --json  # about 20 MB, for the tests

Reports the child's peak (``VmHWM`` of /proc/self/status; ``resource.getrusage`` where there is no /proc), pyarrow's peak allocation (``default_memory_pool().max_memory``)
and Python's (``tracemalloc``), the files' size, the rows, sessions and documents, and whether the peak is under the
budget. No timings.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
BASE_BYTES = 256 << 20
BYTES_PER_DOCUMENT = 400


def generate(folder: pathlib.Path, size_mb: float, seed: int = 0) -> int:
    """Click parts of ``pages`` result pages each (2,000: 20,000 rows, about 35 MB), each part with its own 500
    queries of 40 documents (the distinct documents grow with the files), until their total reaches ``size_mb``;
    and an annotation file. Returns the parts' bytes."""
    import numpy as np
    import pyarrow.feather as feather

    sys.path.insert(0, str(ROOT))
    from tests import baidu_fake

    rng = np.random.default_rng(seed)
    pages, n_queries, docs = (2_000, 500, 40) if size_mb >= 64 else (300, 60, 40)
    parts = folder / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    truth = {"pages": [], "features": rng.random((n_queries, docs, 12)).astype(np.float32),
             "embedding": rng.normal(size=(n_queries, docs, 768)).astype(np.float16)}
    total, p = 0, 0
    while total < size_mb * 1e6:
        table = baidu_fake.click_part(rng, pages, p * pages, n_queries, docs, 10, truth, "bool", query0=p * n_queries)
        truth["pages"].clear()
        path = parts / f"part-{p}_split-0.feather"
        feather.write_feather(table, path)
        total += path.stat().st_size
        p += 1
    feather.write_feather(baidu_fake.annotations(rng, 100, 10, {}), parts / "validation.feather")
    return total


def child(folder: str, batch_rows: int) -> dict:
    """Read the parts in this process; the peak resident memory above the resident memory after the imports."""
    import resource
    import tracemalloc

    import numpy as np  # noqa: F401
    import pyarrow as pa

    from ltrjax.data.baidu_ultr import read_baidu_ultr
    from ltrjax.data.registry import dataset_config

    def status(key: str) -> int:
        """/proc/self/status's VmRSS (now) or VmHWM (peak of this program: ``getrusage``'s ru_maxrss also keeps
        the peak of the parent copied at fork, across exec)."""
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # no /proc: an upper bound

    c = dataset_config({"kind": "baidu_ultr", "name": "baidu_ultr", "path": folder, "batch_rows": batch_rows})
    base = status("VmRSS")
    tracemalloc.start()
    qs = read_baidu_ultr(c, seed=0, cache_dir=str(pathlib.Path(folder) / "cache"))
    py_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    peak = status("VmHWM")
    docs = int(qs.n_docs)
    return {"peak_rss_above_imports": peak - base, "rss_after_imports": base, "arrow_peak": pa.default_memory_pool()
            .max_memory(), "python_peak": py_peak, "documents": docs, "sessions": int(qs.info["sessions"]),
            "click_rows": int(qs.info["click_rows"]), "budget": BASE_BYTES + BYTES_PER_DOCUMENT * docs}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=None, help="size of the generated parts (default 2000; "
                                                                 "--smoke: 20)")
    ap.add_argument("--batch-rows", type=int, default=1 << 16, help="rows per batch (dataset.batch_rows)")
    ap.add_argument("--folder", default=None, help="where to generate (default: a temporary folder)")
    ap.add_argument("--smoke", action="store_true", help="about 20 MB of parts, for the tests")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.batch_rows)))
        return None
    size = args.size_mb if args.size_mb is not None else (20 if args.smoke else 2000)
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(args.folder or tmp)
        total = generate(folder, size)
        proc = subprocess.run([sys.executable, __file__, "--child", str(folder), "--batch-rows", str(args.batch_rows)],
                              capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            raise RuntimeError(f"the reading child failed:\n{proc.stderr[-3000:]}")
        out = {"files_bytes": total, **json.loads(proc.stdout.strip().splitlines()[-1]),
               "batch_rows": args.batch_rows}
    out["under_budget"] = out["peak_rss_above_imports"] <= out["budget"]
    if args.json:
        print(json.dumps(out))
    else:
        mib = lambda b: f"{b / 2**20:.1f} MiB"  # noqa: E731
        print(f"read {out['files_bytes'] / 1e6:.0f} MB of parts ({out['click_rows']} rows, {out['sessions']} sessions, "
              f"{out['documents']} documents): peak {mib(out['peak_rss_above_imports'])} above the imports, budget "
              f"{mib(out['budget'])} (256 MiB + 400 B x documents): {'under' if out['under_budget'] else 'OVER'}; "
              f"pyarrow peak {mib(out['arrow_peak'])}, Python peak {mib(out['python_peak'])}")
    return out


if __name__ == "__main__":
    main()
