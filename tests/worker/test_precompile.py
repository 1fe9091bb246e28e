"""The worker byte-compiles the workflow modules before it takes tasks (the sandbox re-imports them per workflow)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import workflows
from workers.worker import precompile_workflows

FOLDER = Path(workflows.__file__).parent


def test_the_workflow_modules_get_bytecode_the_sandbox_can_load() -> None:
    cache = FOLDER / "__pycache__"
    shutil.rmtree(cache, ignore_errors=True)  # a fresh checkout run under PYTHONDONTWRITEBYTECODE has none
    assert precompile_workflows()
    source = FOLDER / "job_recovery.py"
    compiled = Path(importlib.util.cache_from_source(str(source)))
    assert compiled.exists() and compiled.stat().st_mtime >= source.stat().st_mtime - 1
    # what the import system checks before it uses the bytecode instead of compiling the source
    data = compiled.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(data[8:12], "little") == int(source.stat().st_mtime)


def test_a_folder_that_cannot_be_written_is_a_warning_not_a_failure(tmp_path: Path, monkeypatch) -> None:
    import compileall

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(compileall, "compile_dir", refuse)
    assert precompile_workflows() is False
    assert FOLDER.is_dir()
