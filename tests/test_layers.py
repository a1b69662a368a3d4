"""The core layer stays plain Python: importing it pulls in neither Dagster, RAGAS nor LanceDB."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import ctxwin_dagster.core


def test_core_imports_no_dagster_ragas_or_lancedb():
    modules = sorted(m.name for m in pkgutil.walk_packages(ctxwin_dagster.core.__path__, "ctxwin_dagster.core."))
    assert "ctxwin_dagster.core.tokens" in modules and "ctxwin_dagster.core.fit" in modules
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
