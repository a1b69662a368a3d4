"""The house holds its shape: every import points down (core ← backends ← ask/testing ← defs ←
definitions/runner ← cli), no two modules import each other, the core stays plain Python, only Dagster's
public API is used, modules stay short, and the installed versions are pinned.

Imports are read from the source with ``ast``, so a lazy import inside a function counts as much
as one at the top of a module; the core's plain-Python check imports it for real.
"""

from __future__ import annotations

import ast
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ctxwin_dagster"

#: A module may import from its own layer and the layers below it.
LAYERS = {"core": 0, "backends": 1, "testing": 2, "ask": 2, "defs": 3, "definitions": 4, "runner": 4, "cli": 5}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "ctxwin_dagster" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def _imports(path: Path) -> list[tuple[int, str]]:
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
    return out


def test_every_import_points_down():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = _layer(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if own is None:
            continue
        for line, name in _imports(path):
            target = _layer(name)
            if target is not None and target != own and LAYERS[target] >= LAYERS[own]:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({own}) imports {name} ({target})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_core_imports_nothing_of_the_project_above_it():
    for path in sorted((PACKAGE / "core").rglob("*.py")):
        for line, name in _imports(path):
            assert _layer(name) in (None, "core"), f"{path.name}:{line} imports {name}"


def test_the_pipeline_never_imports_the_testing_package():
    """``ctxwin_dagster.testing`` (the loopback server, the lexical judge) serves tests and benchmarks only."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if "testing" in path.relative_to(PACKAGE).parts:
            continue
        for line, name in _imports(path):
            assert not name.startswith("ctxwin_dagster.testing"), (
                f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}"
            )


def test_only_dagsters_public_api_is_used():
    """No import of Dagster's private modules (``dagster._…``): they change without notice
    between releases. Tests and benchmarks included."""
    root = PACKAGE.parent
    wrong = []
    for folder in ("ctxwin_dagster", "tests", "benchmarks", "evaluations", "deploy"):
        for path in sorted((root / folder).rglob("*.py")):
            for line, name in _imports(path) if folder == "ctxwin_dagster" else _plain_imports(path):
                if name.split(".")[0].startswith("dagster") and any(
                    part.startswith("_") for part in name.split(".")[1:]
                ):
                    wrong.append(f"{path.relative_to(root)}:{line} imports {name}")
    assert not wrong, "private Dagster imports:\n" + "\n".join(wrong)


def _plain_imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.append((node.lineno, node.module or ""))
    return out


#: The longest a module may be, in lines as `ruff format` writes them (120 columns).
MAX_MODULE_LINES = 620
#: Modules allowed to be long: tables of prompt text.
LONG_ALLOWED = {"core/methods/prompts/tables.py"}


def test_modules_have_one_job_and_stay_short():
    """No module grows past about 600 lines of 120 columns (the prompt tables excepted): split it by job instead."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
        and str(p.relative_to(PACKAGE)) not in LONG_ALLOWED
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def _module_graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (a package import counts as its ``__init__``)."""
    modules = {
        ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in PACKAGE.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for _, imported in _imports(path):
            while imported and imported not in modules:  # `from pkg.mod import name`: the module
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def test_no_modules_import_each_other_in_a_circle():
    """Import cycles, lazy imports included: a module that both uses and is used by another
    shares a job with it; the shared part belongs in one of them, or below both."""
    graph = _module_graph()
    cycles = []
    state: dict[str, int] = {}  # 1 = on the path, 2 = done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_constraints_pin_every_requirement_to_a_version_it_allows():
    """``constraints.txt`` (what ``make`` installs from) pins each requirement of pyproject.toml,
    within the range pyproject allows: a new or changed requirement needs the file written again."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    root = PACKAGE.parent
    pins = {}
    for line in (root / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    problems = []
    for text in wanted:
        req = Requirement(text)
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name}: not in constraints.txt")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{req.name}: constraints.txt pins {pin}, pyproject.toml wants {req.specifier}")
    assert not problems, "write constraints.txt again (its header says how): " + "; ".join(problems)


def test_core_imports_no_dagster_ragas_or_lancedb():
    """Importing every core module, in a fresh interpreter, pulls in neither Dagster, RAGAS nor LanceDB."""
    import ctxwin_dagster.core

    modules = sorted(m.name for m in pkgutil.walk_packages(ctxwin_dagster.core.__path__, "ctxwin_dagster.core."))
    assert "ctxwin_dagster.core.budget.tokens" in modules and "ctxwin_dagster.core.budget.fit" in modules
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('dagster', 'ragas', 'lancedb'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core imported {out.stdout.strip()}"


def test_package_ships_py_typed():
    from importlib.resources import files

    assert files("ctxwin_dagster").joinpath("py.typed").is_file()


def test_the_tests_mirror_the_package():
    """A test lives in the folder of the room it tests (``tests/core/text/`` for
    ``ctxwin_dagster/core/text/`` …); only the checks of the whole house stay at the top, and no
    test imports another."""
    tests = PACKAGE.parent / "tests"
    rooms = {p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE}
    misplaced = [
        str(p.relative_to(tests))
        for p in tests.rglob("test_*.py")
        if p.parent != tests
        and p.parent.relative_to(tests).as_posix() not in rooms
        or p.parent == tests
        and p.name != "test_architecture.py"
    ]
    assert not misplaced, f"tests outside a folder named after a package room ({sorted(rooms)}): {misplaced}"
    importing = [
        f"{p.relative_to(tests)}:{line}"
        for p in tests.rglob("*.py")
        for line, name in _plain_imports(p)
        if name.split(".")[0].startswith(("test_", "conftest", "tests"))
    ]
    assert not importing, f"tests that import other tests (share a fixture in conftest.py instead): {importing}"


def test_make_test_keeps_the_order_of_the_test_files(longest_files):
    """``tests/conftest.py`` hands out the longest test files first (``_LONGEST_FILES``), and
    ``make test`` keeps pytest-xdist from sorting them again by their number of tests
    (``--no-loadscope-reorder``). Without either the suite still passes, only slower (one test
    process runs a long file alone at the end): this check says so."""
    root = PACKAGE.parent
    makefile = (root / "Makefile").read_text(encoding="utf-8")
    xdist = re.search(r"^XDIST\s*=\s*(.+)$", makefile, flags=re.M)
    runs = [line for line in makefile.splitlines() if re.search(r"-m pytest\b", line)]
    assert runs, "no pytest command in the Makefile"
    for line in runs:
        flags = line.replace("$(XDIST)", xdist.group(1) if xdist else "")
        if "--dist loadfile" in flags:
            assert "--no-loadscope-reorder" in flags.split(), line
    missing = [name for name in longest_files if not (root / name).is_file()]
    assert not missing, f"renamed or removed test files still in tests/conftest.py's _LONGEST_FILES: {missing}"
    assert list(longest_files.values()) == sorted(longest_files.values(), reverse=True)
