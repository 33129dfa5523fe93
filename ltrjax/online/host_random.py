"""``jax.random``'s threefry draws computed with NumPy on the host, bit for bit (no XLA program to compile).

The simulator's host path draws session plans, initial entry orders and per-member keys once per trial. Done with
``jax.random`` eagerly, every distinct shape is an XLA program, and threefry programs are slow to compile on a CPU
(``init_bucket_state`` alone was about a fifth of a cold end-to-end run's compile seconds, a program per bucket).
These functions compute the same numbers in NumPy: raw ``uint32[2]`` keys in, NumPy arrays out, equal to
``jax.random``'s with JAX's default threefry implementation (``jax_threefry_partitionable``, the default since JAX
0.5; ``tests/test_host_random.py`` compares them with ``jax.random`` and fails if a JAX release changes the draws).
Keys may carry leading batch axes (``[..., 2]``), as ``jax.vmap`` over keys would.
"""

from __future__ import annotations

import numpy as np

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def key_words(key) -> np.ndarray:
    """A key as raw ``uint32[..., 2]`` words: a raw key (JAX or NumPy) as it is, a typed JAX key through
    ``jax.random.key_data``."""
    dtype = getattr(key, "dtype", None)
    if dtype is not None and dtype != np.uint32 and "key" in str(dtype):
        import jax

        key = jax.random.key_data(key)
    words = np.asarray(key)
    if words.dtype != np.uint32 or words.shape[-1:] != (2,):
        raise TypeError(f"expected raw threefry keys uint32[..., 2], got {words.dtype}{list(words.shape)}")
    return words


def prng_key(seed: int) -> np.ndarray:
    """``jax.random.PRNGKey(seed)`` (raw threefry words ``[seed >> 32, seed & 0xFFFFFFFF]``) for a seed in
    [0, 2**31); other seeds go through JAX (their conversion depends on ``jax_enable_x64``)."""
    seed = int(seed)
    if 0 <= seed < 1 << 31:
        return np.asarray([0, seed], np.uint32)
    import jax

    return np.asarray(jax.random.PRNGKey(seed), np.uint32)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k0: np.ndarray, k1: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Threefry-2x32 hash (20 rounds) of counts ``(x0, x1)`` under key ``(k0, k1)``; arrays broadcast."""
    k0, k1 = np.asarray(k0, np.uint32), np.asarray(k1, np.uint32)
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    with np.errstate(over="ignore"):
        x0 = np.asarray(x0, np.uint32) + ks[0]
        x1 = np.asarray(x1, np.uint32) + ks[1]
    x0, x1 = np.broadcast_arrays(x0, x1)
    x0, x1 = x0.copy(), x1.copy()
    with np.errstate(over="ignore"):
        _rounds(x0, x1, ks)
    return x0, x1


def _rounds(x0: np.ndarray, x1: np.ndarray, ks: tuple) -> None:
    """Threefry's 5 x 4 rounds and key injections, in place."""
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 += x1
            x1[...] = _rotl(x1, r)
            x1 ^= x0
        x0 += ks[(i + 1) % 3]
        x1 += ks[(i + 2) % 3]
        x1 += np.uint32(i + 1)


def _split_key(key: np.ndarray, shape: tuple[int, ...]):
    """(k0, k1) of ``key`` ``[..., 2]`` shaped to broadcast against ``shape`` appended to its batch axes."""
    pad = (None,) * len(shape)
    return key[(..., 0) + pad], key[(..., 1) + pad]


def _counts(shape: tuple[int, ...]) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    if size >= 1 << 32:
        raise NotImplementedError("host draws of 2**32 or more numbers")
    return np.arange(size, dtype=np.uint32).reshape(shape)


def split(key, num: int = 2) -> np.ndarray:
    """``jax.random.split(key, num)``: ``uint32[..., num, 2]``."""
    key = key_words(key)
    k0, k1 = _split_key(key, (num,))
    y0, y1 = threefry2x32(k0, k1, np.uint32(0), _counts((num,)))
    return np.stack([y0, y1], axis=-1)


def fold_in(key, data) -> np.ndarray:
    """``jax.random.fold_in(key, data)`` (``data`` a 32-bit integer, or an array of them: one key each)."""
    key = key_words(key)
    data = np.asarray(data)
    if np.any(data < 0) or np.any(data > 0xFFFFFFFF):
        raise ValueError("fold_in data must be an unsigned 32-bit integer")
    data = data.astype(np.uint32)
    k0, k1 = _split_key(key, data.shape)
    y0, y1 = threefry2x32(k0, k1, np.uint32(0), data)
    return np.stack([y0, y1], axis=-1)


def random_bits(key, shape: tuple[int, ...]) -> np.ndarray:
    """32 random bits per number, ``uint32[..., *shape]`` (``jax.random.bits``' threefry bits)."""
    key = key_words(key)
    shape = tuple(int(s) for s in shape)
    k0, k1 = _split_key(key, shape)
    counts = _counts(shape) if shape else np.uint32(0)
    y0, y1 = threefry2x32(k0, k1, np.uint32(0), counts)
    return y0 ^ y1


def uniform(key, shape: tuple[int, ...]) -> np.ndarray:
    """``jax.random.uniform(key, shape)``: float32 in [0, 1)."""
    bits = random_bits(key, shape)
    floats = ((bits >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1.0)
    return np.maximum(np.float32(0.0), floats)


def randint(key, shape: tuple[int, ...], minval: int, maxval: int) -> np.ndarray:
    """``jax.random.randint(key, shape, minval, maxval)`` with int32 bounds: int32 in [minval, maxval)."""
    key = key_words(key)
    halves = split(key, 2)
    higher, lower = random_bits(halves[..., 0, :], shape), random_bits(halves[..., 1, :], shape)
    lo, hi = int(minval), int(maxval)
    if not (-(1 << 31) <= lo < 1 << 31 and -(1 << 31) <= hi < 1 << 31):
        raise ValueError("randint bounds must fit int32")
    span = np.uint32(hi - lo if hi > lo else 1)
    multiplier = ((1 << 16) % int(span)) ** 2 % (1 << 32) % int(span)  # uint32 products wrap, as in XLA
    with np.errstate(over="ignore"):
        offset = (higher % span) * np.uint32(multiplier) + (lower % span)
    offset = offset % span
    return (np.int32(lo) + offset.astype(np.int32)).astype(np.int32)
