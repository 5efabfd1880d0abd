"""The broker core and the message codec know no web framework and no HTTP adapter: the check that
keeps the store a library (tests/store/test_dependencies.py) guards them too."""

from __future__ import annotations

from pathlib import Path

from tests.store.test_dependencies import imported_modules

APP = Path(__file__).resolve().parents[2] / "app"
FORBIDDEN = ("fastapi", "starlette", "uvicorn", "app.api")


def forbidden_imports(path: Path) -> list[str]:
    return sorted(
        name
        for name in imported_modules(path)
        if any(name == root or name.startswith(root + ".") for root in FORBIDDEN)
    )


def test_the_broker_core_and_the_codec_import_no_web_framework() -> None:
    modules = [*sorted((APP / "broker").glob("*.py")), APP / "codec.py"]
    assert len(modules) > 3
    offenders = {path.name: bad for path in modules if (bad := forbidden_imports(path))}
    assert offenders == {}, f"the broker core imports HTTP: {offenders}"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text(
        "from starlette.responses import Response\nfrom app.api.errors import ApiError\nimport app.store\n"
    )
    assert forbidden_imports(module) == ["app.api.errors", "starlette.responses"]
