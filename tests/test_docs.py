"""The README and the user manual (``docs/``): their code snippets run or match the real command lines.

* Python blocks run in a fresh interpreter (at tiny sizes). A block that must not run carries a visible
  title starting ``not run`` (```` ```python title="not run: needs MSLR-30K" ````, shown on the site); it is still
  compiled. ``--8<-- "path"`` lines (pymdownx.snippets) are replaced by the file they include.
* Shell blocks (``bash``): every command is checked against the real command line it names —
  ``python -m ltrjax.run`` overrides are parsed by Hydra and composed against ``conf/`` (a sweep with one
  value of each swept key; ``hydra/...`` launcher and sweeper options are parsed only, their plugins come with
  the ``cluster`` extra), scripts and ``python -m`` modules must accept every ``--option`` used (from their
  ``--help``), ``pip install`` extras must exist in ``pyproject.toml``, pytest markers and paths must exist.
  A command no rule knows fails the test, so a new kind of snippet gets a rule here.
* The README stays a front door (at most 250 lines) whose set-up and test commands are the ones ``.ci/run``
  runs, and its links point at files that exist; the committed-runs page lists every ``docs/results/`` folder.

The site itself (links, anchors, API references) is checked by ``mkdocs build --strict`` in ``.ci/run``.
The blocks are found with markdown-it-py (a dependency of rich, which flax requires).
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import jax
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOT_BUILT = ("results", "_incoming")  # committed run folders and other engineers' drafts: not the manual's text
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SNIPPET_INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)
README_MAX_LINES = 250


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    title: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def manual_files() -> list[Path]:
    pages = [p for p in sorted(DOCS.rglob("*.md")) if p.relative_to(DOCS).parts[0] not in NOT_BUILT]
    return [ROOT / "README.md", *pages]


def blocks_of(path: Path) -> list[Block]:
    out = []
    for token in MarkdownIt("commonmark").parse(path.read_text()):
        if token.type != "fence":
            continue
        lang, _, options = token.info.strip().partition(" ")
        title = re.search(r'title="([^"]*)"', options)
        out.append(Block(path, token.map[0] + 1, lang, title.group(1) if title else "", token.content))
    return out


ALL_BLOCKS = [b for p in manual_files() for b in blocks_of(p)]
PYTHON = [b for b in ALL_BLOCKS if b.lang == "python"]
SHELL = [b for b in ALL_BLOCKS if b.lang in ("bash", "sh", "shell")]


def test_every_block_has_a_known_language():
    """Python and shell blocks are checked below; untagged, text and markdown blocks are text (a file tree, the
    snippet convention). A block in any other language would go unchecked, so it needs a rule here first."""
    assert PYTHON and SHELL
    text = ("", "text", "markdown")
    unknown = [f"{b.id} ({b.lang})" for b in ALL_BLOCKS if b.lang not in ("python", "bash", "sh", "shell", *text)]
    assert not unknown, f"code blocks in a language no test checks: {unknown}"


def with_includes(code: str) -> str:
    def include(m):
        target = ROOT / m.group(1)
        assert target.is_file(), f"--8<-- includes {m.group(1)}, which does not exist"
        return target.read_text()

    return SNIPPET_INCLUDE.sub(include, code)


# --------------------------------------------------------------------------- Python blocks
@pytest.mark.parametrize("block", PYTHON, ids=lambda b: b.id)
def test_python_block_runs(block: Block, tmp_path):
    code = with_includes(block.code)
    compile(code, block.id, "exec")
    if block.title.startswith("not run"):
        return  # visibly marked on the page; compiled above
    # the suite's persistent XLA cache (tests/conftest.py), so a rerun does not compile the snippet's programs again
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(jax.config.jax_compilation_cache_dir),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": str(jax.config.jax_persistent_cache_min_compile_time_secs)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{block.id} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


# --------------------------------------------------------------------------- shell blocks
def commands(code: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped, split at && and ;."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        tokens = shlex.split(line, comments=True)
        cmd: list[str] = []
        for tok in tokens:
            if tok in ("&&", ";", "||"):
                out.append(cmd)
                cmd = []
            else:
                cmd.append(tok)
        out.append(cmd)
    return [c for c in out if c]


HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "-p", "--package", "--config-name", "-cn", "--config-dir", "-cd")
HYDRA_FLAGS = ("-m", "--multirun", "--resolve", "--help", "-h", "--hydra-help")


def check_run_overrides(args: list[str], where: str) -> None:
    """``python -m ltrjax.run ARGS``: Hydra parses every override; the config composes with one value per sweep."""
    overrides, i = [], 0
    while i < len(args):
        if args[i] in HYDRA_FLAGS_WITH_VALUE:
            i += 2
            continue
        if args[i] not in HYDRA_FLAGS:
            assert not args[i].startswith("-"), f"{where}: {args[i]!r} is not an option of python -m ltrjax.run"
            overrides.append(args[i])
        i += 1
    parsed = OverridesParser.create().parse_overrides(overrides)  # raises on a malformed override
    composed = []
    for ov in parsed:
        if ov.key_or_group.startswith("hydra"):
            continue  # launcher / sweeper / run-dir settings: Hydra's own config, plugins from the cluster extra
        key = ov.key_or_group if ov.package is None else f"{ov.key_or_group}@{ov.package}"
        if ov.is_delete():
            composed.append(f"~{key}")
            continue
        sweep = ov.value()
        if isinstance(sweep, ChoiceSweep):
            value = next(ov.sweep_string_iterator())
        elif isinstance(sweep, (IntervalSweep, RangeSweep)):
            value = str(sweep.start)
        else:
            value = ov.get_value_element_as_str()
        prefix = {"ADD": "+", "FORCE_ADD": "++"}.get(ov.type.name, "")
        composed.append(f"{prefix}{key}={value}")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        compose("config", overrides=composed)  # raises on an unknown group option or key


@functools.cache
def help_text(*argv: str) -> str:
    """``python ARGV --help``'s text, in this process: the script's or module's ``main(["--help"])`` (what its
    ``__main__`` block calls; the scripts run this way in tests/test_benchmarks.py), no interpreter start-up."""
    import contextlib
    import importlib
    import io

    from tests.scripts import load_script

    module = importlib.import_module(argv[1]) if argv[0] == "-m" else load_script(argv[0])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        module.main(["--help"])
    assert exc.value.code in (0, None), f"{' '.join(argv)} --help failed: {exc.value.code}"
    return out.getvalue()


def check_options(argv: list[str], args: list[str], where: str) -> None:
    text = help_text(*argv)
    for arg in args:
        if arg.startswith("-"):
            option = arg.split("=", 1)[0]
            assert re.search(rf"(^|[\s,\[]){re.escape(option)}\b", text), \
                f"{where}: {' '.join(argv)} has no option {option}"


def check_pip(args: list[str], where: str) -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    for arg in args:
        m = re.fullmatch(r"\.\[([\w,-]+)\]", arg)
        if m:
            missing = [e for e in m.group(1).split(",") if e not in extras]
            assert not missing, f"{where}: pyproject.toml has no extra {missing}"


def check_pytest(args: list[str], where: str) -> None:
    markers = {m.split(":")[0].strip() for m in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]}
    for i, arg in enumerate(args):
        if arg == "-m":
            used = set(re.findall(r"\w+", args[i + 1])) - {"not", "and", "or"}
            assert used <= markers, f"{where}: unknown pytest markers {used - markers}"
        elif not arg.startswith("-") and (i == 0 or args[i - 1] != "-m"):
            assert (ROOT / arg.split("::")[0]).exists(), f"{where}: no such test path {arg}"


EXTERNAL = {"cd", ".", "source", "python3", "ir_measures", "trec_eval", "export", "mkdocs"}


def check_command(cmd: list[str], where: str) -> None:
    head = cmd[0]
    if head in ("pip", "pip3"):
        return check_pip(cmd[1:], where)
    if head in EXTERNAL:
        return None
    if head == "bash":
        assert (ROOT / cmd[1]).is_file(), f"{where}: no such script {cmd[1]}"
        return None
    assert head == "python", f"{where}: no rule checks the command {' '.join(cmd)!r}; add one to tests/test_docs.py"
    if cmd[1] == "-m":
        module, args = cmd[2], cmd[3:]
        if module == "pytest":
            return check_pytest(args, where)
        if module == "ltrjax.run":
            return check_run_overrides(args, where)
        assert module.startswith("ltrjax."), f"{where}: python -m {module} is not ltrjax's"
        return check_options(["-m", module], args, where)
    script = cmd[1]
    assert (ROOT / script).is_file(), f"{where}: no such script {script}"
    return check_options([script], cmd[2:], where)


@pytest.mark.parametrize("block", SHELL, ids=lambda b: b.id)
def test_shell_block_matches_the_real_command_lines(block: Block):
    for cmd in commands(block.code):
        check_command(cmd, block.id)


def test_shell_checks_catch_wrong_commands():
    """The rules above fail on what they must catch (an unknown key, option, extra, script or marker)."""
    wrong = ["python -m ltrjax.run sim.entry_prb=0.5", "python -m ltrjax.run +dataset=no_such_dataset",
             "python -m ltrjax.run -m 'sim.top_k=choice(3,5' ", "python experiments/offline_table.py --no-such-flag",
             "pip install -e '.[no_such_extra]'", "python -m pytest -m no_such_marker", "python nowhere.py",
             "rm -rf /"]
    for line in wrong:
        with pytest.raises(Exception):  # noqa: B017 — AssertionError or Hydra's own errors
            for cmd in commands(line):
                check_command(cmd, "test")


# --------------------------------------------------------------------------- the README as a front door
README = (ROOT / "README.md").read_text()


def test_readme_is_a_front_door():
    assert len(README.splitlines()) <= README_MAX_LINES
    for heading in ("## A five-minute tour", "## Where results go", "## The manual", "## Tests"):
        assert heading in README, heading


def test_readme_setup_and_test_commands_are_the_ones_ci_runs():
    """``.ci/run`` installs "exactly as the README says": its set-up and test lines are the README's first block's."""
    ci = (ROOT / ".ci" / "run").read_text()
    first = blocks_of(ROOT / "README.md")[:2]
    setup = commands(first[0].code)
    test = commands(first[1].code)
    assert setup[:3] == [["python3", "-m", "venv", ".venv"], [".", ".venv/bin/activate"],
                         ["pip", "install", "-e", ".[test]"]]
    assert 'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]"' in ci
    assert test == [["python", "-m", "pytest", "-q"]]
    assert re.search(r"^python -m pytest -q$", ci, re.M)
    assert re.search(r"^mkdocs build --strict", ci, re.M) and 'pip install -e ".[docs]"' in ci


def test_readme_links_point_at_files():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into docs/"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


# a run folder's binary outputs (the significance tests' paired units, saved models): part of the folder that holds
# them, kept so the run can resume, and left out of the docs build (mkdocs.yml's exclude_docs)
RUN_OUTPUT_FOLDERS = ("arrays", "models")


def test_committed_runs_page_lists_every_results_folder():
    page = (DOCS / "committed-runs.md").read_text()
    folders = sorted(p.relative_to(DOCS / "results").as_posix() for p in (DOCS / "results").rglob("*") if p.is_dir())
    assert folders
    listed = [f for f in folders if not set(f.split("/")[1:]) & set(RUN_OUTPUT_FOLDERS)]
    missing = [f for f in listed if f"`{f}/`" not in page]
    assert not missing, f"docs/committed-runs.md does not list {missing}"
    excluded = (ROOT / "mkdocs.yml").read_text()
    assert all(f"results/*/{name}/" in excluded for name in RUN_OUTPUT_FOLDERS)  # not copied into the site


def test_docs_pages_cited_in_code_exist():
    """Tests, experiments and the package cite the manual's pages (``docs/fidelity.md``); each must exist."""
    cited = {m for folder in ("tests", "experiments", "benchmarks", "examples", "ltrjax")
             for path in (ROOT / folder).rglob("*.py")
             for m in re.findall(r"docs/[\w/.-]+?\.md", path.read_text())}
    assert "docs/fidelity.md" in cited
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, f"pages cited in the code that do not exist: {missing}"
