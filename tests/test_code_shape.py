"""The online simulator's code stays in small pieces (issue 40): ``online/simulator.py`` is a thin front of at most
400 lines, no module of ``ltrjax/online/`` is over 500 lines and no function there over 60 (docstring included)."""

import ast
from pathlib import Path

ONLINE = Path(__file__).resolve().parents[1] / "ltrjax" / "online"
MAX_MODULE_LINES, MAX_FRONT_LINES, MAX_FUNCTION_LINES = 500, 400, 60


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method of ``path`` longer than ``limit`` lines (nested ones too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_the_checker_finds_a_long_function(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 60 + "    return x\n")
    assert long_functions(source) == [("long", 62)]


def test_online_modules_and_functions_are_small():
    modules = sorted(ONLINE.glob("*.py"))
    assert {"simulator.py", "step.py", "schedule.py", "trial.py", "segment.py", "plan.py"} <= {p.name for p in modules}
    assert len((ONLINE / "simulator.py").read_text(encoding="utf-8").splitlines()) <= MAX_FRONT_LINES
    too_long = {p.name: n for p in modules if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert too_long == {}
    functions = {p.name: found for p in modules if (found := long_functions(p))}
    assert functions == {}
