"""The package's import graph (issue 23): no cycle, and the core packages import neither the config layer nor
``ltrjax/report/``.

Read statically with ``ast`` from every module of ``ltrjax/``: module-level and function-level imports alike
(a function-level import is an edge too: it only moves a cycle to run time). ``from ltrjax.x import y`` is an
edge to the module ``ltrjax.x.y`` when there is one, else to ``ltrjax.x``; relative imports are resolved.
Not edges: imports under ``if TYPE_CHECKING:`` (they never run) and the package ``__init__`` a submodule import
runs implicitly (``ltrjax/__init__.py`` loads its names lazily, on first use).

The config layer is what turns a command line or a config file into a run: ``ltrjax.schema`` (the project's
schemas and ``validate``), ``ltrjax.structured`` (the generic mapping-to-dataclass machinery), the runners
``ltrjax.runner`` (online) and ``ltrjax.offline_runner``, ``ltrjax.run``, ``ltrjax.experiment`` and ``ltrjax.api``.
``ltrjax.constraints`` is not part of it: it is the field-check vocabulary (``PositiveInt``, ``OneOf``,
``ConfigError``) that the packages' own dataclasses (``SimConfig``, ``FitConfig``, ``TrainConfig``,
``OfflineConfig``) use in ``__post_init__``, as gymnax's ``EnvParams`` carry their own checks; it imports no other
module of ltrjax, so it cannot close a circle. Run-folder records (``ltrjax.record``: the one reader/writer of
results.json) are neutral too: the offline runners write them and ``report/`` reads them.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ltrjax"
CORE = ("ltrjax.online", "ltrjax.offline", "ltrjax.models")
CONFIG_LAYER = ("ltrjax.schema", "ltrjax.structured", "ltrjax.runner", "ltrjax.offline_runner", "ltrjax.run",
                "ltrjax.experiment", "ltrjax.api")
REPORT = "ltrjax.report"


def module_files(package: Path = PACKAGE) -> dict[str, Path]:
    """{dotted module name: file} of every module of the package (a package's name for its ``__init__.py``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _runs(tree: ast.AST):
    """The nodes of ``tree`` that run: ``if TYPE_CHECKING:`` bodies left out (their ``else`` kept)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ltrjax that module ``name`` (file ``path``) imports, at module or function level."""

    def known(dotted: str) -> str | None:  # the deepest module that ``dotted`` names or lies in
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runs(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {known(a.name) for a in node.names if _within(a.name, "ltrjax")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not _within(source, "ltrjax"):
                continue
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else known(source))
    found.discard(None)
    found.discard(name)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = module_files(package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports (``[a, b, ..., a]``), or None when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_reader_sees_module_and_function_level_imports():
    """The checks below mean something only if the reader finds the edges it should."""
    graph = import_graph()
    assert "ltrjax.online.simulator" in graph["ltrjax.runner"]                 # module level
    assert "ltrjax.offline_runner" in graph["ltrjax.api"]                      # inside a function
    assert "ltrjax.offline.experiment" in graph["ltrjax.offline.fidelity"]     # from ltrjax.offline import experiment
    assert "ltrjax.data.queryset" in graph["ltrjax.data.layout"]               # from .queryset import ...
    assert "ltrjax.data.preprocess" not in graph["ltrjax.data.queryset"]       # only under TYPE_CHECKING
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_core_packages_import_neither_the_config_layer_nor_report():
    """``online/``, ``offline/`` and ``models/`` take typed objects; the config layer builds them and ``report/``
    reads what runs write."""
    bad = sorted((name, dep) for name, deps in import_graph().items() if any(_within(name, c) for c in CORE)
                 for dep in deps if dep in CONFIG_LAYER or _within(dep, REPORT))
    assert not bad, "core modules importing the config layer or report/: " + "; ".join(f"{a} -> {b}" for a, b in bad)


def test_report_reads_results_not_simulators():
    """``report/`` reads what runs write (results.json, the arrays a run saved), never a ``Simulator``, its state or
    an estimator: it imports no module of ``online/``, ``offline/`` or ``models/``."""
    bad = sorted((name, dep) for name, deps in import_graph().items() if _within(name, REPORT)
                 for dep in deps if any(_within(dep, c) for c in CORE))
    assert not bad, "report/ importing the simulation core: " + "; ".join(f"{a} -> {b}" for a, b in bad)


def test_constraints_and_records_are_leaves():
    """``ltrjax.constraints`` (field checks) and ``ltrjax.record`` (run-folder records) import no other module of
    ltrjax (the record only the package's ``__version__``), so every layer may use them without a circle."""
    graph = import_graph()
    assert graph["ltrjax.constraints"] == set()
    assert graph["ltrjax.record"] <= {"ltrjax"}
