"""What the simulator moves from the host to the device, counted (``TransferMeter``): the explicit puts of a
population's set-up (``put``) and the host values a compiled program is called with (``count_host``, moved
implicitly at the call). ``jax.transfer_guard_host_to_device("disallow")`` catches every other transfer; the
transfers made on the host by design (a retrain's examples) are declared (``declared_transfers``)."""

from __future__ import annotations

import contextlib

import jax
import numpy as np


class TransferMeter:
    """Bytes the simulator puts on the device explicitly (``put``), per named part, while installed
    (``with TransferMeter() as meter``); implicit transfers are what ``jax.transfer_guard_host_to_device`` catches."""

    active: list["TransferMeter"] = []

    def __init__(self):
        self.bytes: dict[str, int] = {}

    def __enter__(self) -> "TransferMeter":
        TransferMeter.active.append(self)
        return self

    def __exit__(self, *exc):
        TransferMeter.active.remove(self)

    def count(self, part: str) -> int:
        """The bytes counted under ``part`` (0: none)."""
        return int(self.bytes[part]) if part in self.bytes else 0


def put(tree, part: str):
    """``jax.device_put(tree)`` of host values, their bytes counted under ``part`` by every active
    ``TransferMeter`` (device arrays in ``tree`` move nothing and count nothing)."""
    count_host(tree, part)
    return jax.device_put(tree)


@contextlib.contextmanager
def declared_transfers():
    """Host-to-device transfers allowed inside a ``jax.transfer_guard_host_to_device("disallow")`` region: a
    retrain's examples and keys, which are made on the host by design."""
    with jax.transfer_guard_host_to_device("allow"):
        yield


def host_bytes(tree) -> int:
    """The bytes of the host (NumPy) leaves of ``tree``: what a program called with it moves to the device."""
    return sum(int(leaf.nbytes) for leaf in jax.tree_util.tree_leaves(tree) if isinstance(leaf, (np.ndarray, np.generic)))


def count_host(tree, part: str) -> None:
    """Count ``tree``'s host leaves under ``part`` in every active ``TransferMeter`` (a program's arguments)."""
    if TransferMeter.active:
        n = host_bytes(tree)
        for meter in TransferMeter.active:
            meter.bytes[part] = meter.bytes.get(part, 0) + n
