"""A population's per-member values computed on the device a block of members at a time and read on the host.

A retrain reads every member's dataset-order counters (``simulator.retrain_views``) or eligible documents
(``retrain_documents.RetrainDocuments``). Each is computed for as many members at once as a byte budget holds (all
of a population at MQ2007 size, one member at MSLR-30K size) and brought to the host when a member of the block is
first read; the last block read is kept for its members' other reads, so a retrain holds one block's copy at a time,
not the population's. Every block has the same width (the last one starts early), so a population compiles one
program.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


class MemberBlocks:
    """``read(i, *args)``: (the host block that holds member i, i's index in it). ``fetch(start, count, *args)``
    computes and brings the block of members ``start .. start + count - 1``; ``count`` is as many members as
    ``block_bytes`` holds at ``member_bytes`` each, at least one and at most ``n_members``."""

    def __init__(self, fetch: Callable[..., Any], n_members: int, member_bytes: int, block_bytes: int):
        self.n_members = n_members
        self.count = int(max(1, min(n_members, block_bytes // max(member_bytes, 1))))
        self._block = functools.lru_cache(maxsize=1)(fetch)  # the last block read only

    def start_of(self, i: int) -> int:
        """The first member of member i's block."""
        return min(i - i % self.count, self.n_members - self.count)

    def read(self, i: int, *args) -> tuple[Any, int]:
        start = self.start_of(i)
        return self._block(start, self.count, *args), i - start
