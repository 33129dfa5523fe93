"""A retrain's eligible documents filtered and compacted on the device (``sim.retrain_examples=device``).

The host path (``training_data.member_splits`` over ``simulator.retrain_views``) brings every member's counters
and entered masks to the host, in dataset order, and filters them there with NumPy: every padded cell, every
document that never entered. Here the filter runs where the counters are (EBRank §5.1's filter: entered real
documents of the split's queries shown more than ``min_impressions`` times) and only the eligible documents come
back, compacted in the host path's order (bucket after bucket, row-major), so the examples are the same arrays.
Subsampling (``models.train.subsample``) and padding stay on the host: the subset is NumPy's draw, which a run's
results depend on.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.data.layout import PaddedDataset
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.online.member_blocks import MemberBlocks
from ltrjax.online.state import member_in_dataset_order


@dataclasses.dataclass(frozen=True)
class DocumentCells:
    """Every cell of the padded layout, flat (bucket after bucket, row-major), on the device: the document id of
    its row in ``data.document_table()`` (``doc``), its query's split (``split``) and whether it holds a real
    document (``real``); ``capacity``: the documents of training and of validation queries (a split's most)."""

    doc: jax.Array  # i32 [cells]
    split: jax.Array  # i8 [cells]
    real: jax.Array  # bool [cells]
    capacity: tuple[int, int]


def document_cells(data: PaddedDataset) -> DocumentCells:
    """The layout's ``DocumentCells`` (made with NumPy, put on the device once per simulator)."""
    doc = np.concatenate([(start + np.asarray(b.doc_row)).reshape(-1)
                          for b, start in zip(data.buckets, data.document_starts)]).astype(np.int32)
    split = np.concatenate([np.broadcast_to(np.asarray(b.split, np.int8)[:, None], b.doc_mask.shape).reshape(-1)
                            for b in data.buckets])
    real = np.concatenate([np.asarray(b.doc_mask).reshape(-1) for b in data.buckets])
    capacity = tuple(int(np.sum(real & (split == s))) for s in (TRAIN, VALI))
    return DocumentCells(*jax.device_put((doc, split, real)), capacity=capacity)


@functools.partial(jax.jit, static_argnames=("names", "count", "capacity"))
def _members_documents(states, start, doc, split, real, min_impressions, names, count, capacity):
    """Members ``start .. start + count - 1``: per split (training, validation), how many documents are eligible
    ``[count]`` and their ids and counters ``names``, compacted to the front of ``[count, capacity]`` arrays
    (``lax.map`` over the members: one program for every block of ``count``)."""
    def one(i):
        counters, entered = member_in_dataset_order(states, i, names)
        values = {name: jnp.concatenate([getattr(c, name).reshape(-1) for c in counters]) for name in names}
        entered = jnp.concatenate([e.reshape(-1) for e in entered])
        eligible = entered & real & (values["impressions"] > min_impressions)
        out = []
        for which, size in zip((TRAIN, VALI), capacity):
            keep = eligible & (split == which)
            at = jnp.nonzero(keep, size=size, fill_value=0)[0]  # in cell order: the host path's order
            out.append((jnp.sum(keep, dtype=jnp.int32), {"doc": doc[at], **{k: v[at] for k, v in values.items()}}))
        return tuple(out)

    return jax.lax.map(one, start + jnp.arange(count))


class RetrainDocuments:
    """Reads member i's eligible (training, validation) documents (``read``), computed on the device for as many
    members at once as ``block_bytes`` of output hold and brought to the host block by block (``MemberBlocks``)."""

    def __init__(self, states, names: tuple[str, ...], n_members: int, cells: DocumentCells, block_bytes: int):
        self.states, self.cells = tuple(states), cells
        counters = states[0].counters
        self.names = tuple(n for n in names if getattr(counters, n) is not None)  # as gather_documents reads them
        if "impressions" not in self.names:
            raise ValueError("a retrain's documents are filtered by their impressions: the counter must be kept")
        self.blocks = MemberBlocks(self._fetch, n_members, sum(cells.capacity) * 4 * (1 + len(self.names)),
                                   block_bytes)

    def _fetch(self, start: int, count: int, min_impressions: float):
        c = self.cells
        return jax.device_get(_members_documents(self.states, np.int32(start), c.doc, c.split, c.real,
                                                 np.float32(min_impressions), self.names, count, c.capacity))

    def read(self, i: int, min_impressions: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Member i's (training, validation) documents: ids ``doc`` and the kept counters, as
        ``training_data.gather_documents`` returns them for ``split_cells`` without a limit."""
        block, at = self.blocks.read(i, float(min_impressions))
        return tuple({k: v[at, :n[at]] for k, v in docs.items()} for n, docs in block)
