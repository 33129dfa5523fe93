"""On-disk cache of parsed arrays, keyed by a hash of the source file's bytes."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile
import time
import zipfile
from typing import Mapping

import numpy as np

CACHE_ENV = "LTRJAX_CACHE"
_HASH_BLOCK = 1 << 22
_RACY_NS = 2_000_000_000


def cache_root(cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """The cache folder: the argument, else ``$LTRJAX_CACHE``, else ``~/.cache/ltrjax``."""
    if cache_dir is not None:
        return pathlib.Path(cache_dir).expanduser()
    env = os.environ.get(CACHE_ENV)
    if env:
        return pathlib.Path(env).expanduser()
    return pathlib.Path.home() / ".cache" / "ltrjax"


def file_digest(path: str | os.PathLike, root: pathlib.Path | None = None) -> str:
    """blake2b hex digest of a file's bytes.

    With ``root``, the digest is remembered under ``root/digests`` against the file's path,
    size, inode and times, so an unchanged big file is not re-hashed on every load. As in
    git's "racy" rule, a file modified less than two seconds before hashing is not
    remembered, so a rewrite within one timestamp tick cannot reuse a stale digest.
    """
    path = pathlib.Path(path)
    stat = path.stat()
    stamp = {
        "path": str(path.resolve()),
        "size": stat.st_size,
        "inode": stat.st_ino,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
    }
    memo = None if root is None else root / "digests" / (_short_hash(stamp["path"]) + ".json")
    if memo is not None:
        try:
            saved = json.loads(memo.read_text())
            if all(saved.get(k) == v for k, v in stamp.items()):
                return saved["digest"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
    digest = h.hexdigest()
    settled = time.time_ns() - stat.st_mtime_ns > _RACY_NS
    if memo is not None and settled:
        _atomic_write(memo, json.dumps({**stamp, "digest": digest}).encode())
    return digest


def cache_key(digest: str, version: int, params: Mapping[str, object]) -> str:
    """File name stem for a cached parse of a file with this digest, parser version and arguments."""
    args = json.dumps(dict(params), sort_keys=True, default=str)
    return f"{digest}-v{version}-{_short_hash(args)}"


def load_arrays(
    root: pathlib.Path, kind: str, key: str, names: tuple[str, ...]
) -> dict[str, np.ndarray] | None:
    """Arrays stored under ``root/kind/key.npz``, or None if absent or unreadable."""
    path = root / kind / f"{key}.npz"
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in names}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError):
        return None


def save_arrays(root: pathlib.Path, kind: str, key: str, arrays: Mapping[str, np.ndarray]) -> pathlib.Path:
    """Store arrays as ``root/kind/key.npz`` atomically (temporary file, then rename)."""
    path = root / kind / f"{key}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return path


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:  # the digest memo is only an optimisation
        if tmp is not None:
            _remove_quietly(tmp)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _short_hash(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
