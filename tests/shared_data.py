"""Where the small real datasets for tests live (``../shared/data`` beside the repository)."""

import pathlib

import pytest

MQ2008 = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data" / "MQ2008"
needs_mq2008 = pytest.mark.skipif(
    not (MQ2008 / "Fold1" / "train.txt").is_file(),
    reason=f"MQ2008 not found at {MQ2008} (expected ../shared/data/MQ2008 next to the repository)",
)
