"""Adapters sit below workers: nothing under adapters/ imports `workers` (not even for type checking).

The adapters are built from settings in `workers/factories/`; an adapter that
needs a setting takes it as an argument.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = REPO_ROOT / "adapters"
FORBIDDEN = "workers"


def upward_imports(source: str, *, filename: str = "<source>") -> list[str]:
    """`line: module` for every import of `workers` (or a submodule) in `source`, at any depth."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (  # importlib.import_module("workers...") / __import__("workers...")
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None) == "__import__")
        ):
            names = [node.args[0].value]
        found += [f"{node.lineno}: {name}" for name in names if name == FORBIDDEN or name.startswith(FORBIDDEN + ".")]
    return found


def test_there_are_adapter_modules_to_check() -> None:
    modules = list(ADAPTERS.rglob("*.py"))
    assert len(modules) > 20 and (ADAPTERS / "slurm" / "client.py") in modules


def test_no_adapter_module_imports_workers() -> None:
    offenders = {
        str(path.relative_to(REPO_ROOT)): hits
        for path in sorted(ADAPTERS.rglob("*.py"))
        if (hits := upward_imports(path.read_text(), filename=str(path)))
    }
    assert offenders == {}, f"adapters import workers (build them in workers/factories/ instead): {offenders}"


@pytest.mark.parametrize(
    "source",
    [
        "from workers.settings import Settings\n",
        "import workers.settings as s\n",
        "import os, workers\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from workers import settings\n",
        "def f():\n    from workers.settings import ClusterSettings\n",
        "import importlib\nimportlib.import_module('workers.settings')\n",
    ],
)
def test_the_check_finds_every_way_of_importing_workers(source: str) -> None:
    assert upward_imports(source)


def test_the_check_leaves_look_alike_names_alone() -> None:
    assert upward_imports("import workersx\nfrom adapters.workers import x\nfrom .workers import y\n") == []
