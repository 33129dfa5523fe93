"""BM25: rank by the dataset's BM25 column (the EBRank warm-up policy and a baseline)."""

from __future__ import annotations

from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online.policies.base import Policy


class BM25(Policy):
    name = "bm25"

    def __init__(self, data: PaddedDataset):
        if data.bm25_column < 0:
            raise ValueError(f"dataset {data.name!r} has no BM25 column (bm25_feature in its config); "
                             "the BM25 policy and the BM25 warm-up need one")
        self.column = data.bm25_column

    def prepare(self, params, bucket: Bucket, behaviour=None):
        return bucket.features[..., self.column]
