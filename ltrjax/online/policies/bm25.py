"""BM25: rank by the dataset's BM25 column (the EBRank warm-up policy and a baseline), or by another feature."""

from __future__ import annotations

from ltrjax.constraints import PositiveInt
from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online.policies.base import Policy


class BM25(Policy):
    """Ranks by the BM25 column, or by original feature id ``feature`` (1-based) when given: the stand-in
    for BM25 on data without one (``dataset.warmup_feature``)."""

    name = "bm25"
    narrow_rows = True
    counters_read = ()  # ranks by a feature: no counter (the state keeps clicks, for the record)

    def __init__(self, data: PaddedDataset, feature: PositiveInt | None = None, name: str | None = None):
        if feature is not None:
            self.column = data.column_of_feature(feature)
            self.name = name or f"feature_{int(feature)}"
        elif data.bm25_column < 0:
            raise ValueError(f"dataset {data.name!r} has no BM25 column (bm25_feature in its config); "
                             "the BM25 policy and the BM25 warm-up need one, or a feature to rank by instead "
                             "(dataset.warmup_feature)")
        else:
            self.column = data.bm25_column
            self.name = name or self.name

    def prepare(self, params, bucket: Bucket, behaviour=None):
        return bucket.on_slots(bucket.doc_features[:, self.column])
