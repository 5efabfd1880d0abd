"""The store is a library: it imports the standard library and itself, nothing else."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

STORE = Path(__file__).resolve().parents[2] / "app" / "store"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_store_imports_only_the_standard_library_and_itself() -> None:
    offenders = {}
    for path in sorted(STORE.glob("*.py")):
        bad = {
            name
            for name in imported_modules(path)
            if name.split(".")[0] not in sys.stdlib_module_names
            and name != "app.store"
            and not name.startswith("app.store.")
            and name != "__future__"
        }
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}, f"store modules import outside the standard library: {offenders}"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("from fastapi import FastAPI\nimport app.api.app\n")
    assert imported_modules(module) == {"fastapi", "app.api.app"}
