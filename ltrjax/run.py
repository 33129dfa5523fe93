"""Hydra entry point: ``python -m ltrjax.run [+dataset=NAME] [experiment=NAME] [key=value ...]``.

The configs are ``conf/`` of the source checkout, or the same files installed as the package data
``ltrjax/conf`` (``ltrjax.schema.conf_dir``), so the command works from any directory. A config that
the schemas refuse (``ltrjax.schema``), missing or malformed data exit with status 2 and one paragraph
on stderr; so does a composition error Hydra reports itself (an unknown group option, or an override
of a key that does not exist without ``+``).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ltrjax.constraints import ConfigError
from ltrjax.data.errors import DataFormatError, DatasetNotFoundError
from ltrjax.schema import conf_dir

log = logging.getLogger("ltrjax")
_task_started = False  # set once Hydra has composed a config and called the task


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """Run the configured experiment; returns its objective (for Hydra sweepers)."""
    global _task_started
    _task_started = True
    from ltrjax.experiment import run_experiment

    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        return run_experiment(cfg, out_dir, overrides=list(hydra_cfg.overrides.task), cwd=Path(hydra_cfg.runtime.cwd))
    except (ConfigError, DatasetNotFoundError, DataFormatError) as err:
        print(f"ltrjax: {err}", file=sys.stderr)
        sys.exit(2)


def cli() -> None:
    """``main`` with Hydra's own composition errors (reported before the task starts) exiting 2, not 1."""
    try:
        main()
    except SystemExit as exit_:
        multirun = any(a in ("-m", "--multirun") for a in sys.argv[1:])  # jobs may run in other processes
        if exit_.code == 1 and not _task_started and not multirun:
            print("ltrjax: the configuration could not be composed (see above); status 2", file=sys.stderr)
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
