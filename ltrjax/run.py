"""Hydra entry point: ``python -m ltrjax.run [+dataset=NAME] [experiment=NAME] [key=value ...]``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ltrjax.data.errors import DataFormatError, DatasetNotFoundError

log = logging.getLogger("ltrjax")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """Run the configured experiment; returns its objective (for Hydra sweepers)."""
    from ltrjax.experiment import run_experiment

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        return run_experiment(cfg, out_dir)
    except (DatasetNotFoundError, DataFormatError) as err:
        print(f"ltrjax: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
