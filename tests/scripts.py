"""Run a repository script (benchmark, experiment, example) in this process through its ``main(argv)``."""

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load_script(relative: str):
    """The module of the script at ``relative`` (to the repository root), executed."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location("script_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import does: dataclasses look string annotations up there
    spec.loader.exec_module(module)
    return module


def run_main(relative: str, argv: list[str], capsys):
    """(return value of the script's ``main(argv)``, its stdout)."""
    module = load_script(relative)
    capsys.readouterr()
    returned = module.main(argv)
    return returned, capsys.readouterr().out


def last_json(stdout: str) -> dict:
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])
