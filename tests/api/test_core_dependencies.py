"""The broker core and the message codec know no web framework, no HTTP adapter and no HTTP or
WebSocket client: the check that keeps the store a library (tests/store/test_dependencies.py) guards
them too. The core's calls to other processes go through the interfaces it declares
(app/broker/outbound.py), carried out by the outbound adapter (app/outbound/) it is handed."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.store.test_dependencies import imported_modules

APP = Path(__file__).resolve().parents[2] / "app"
FORBIDDEN = ("fastapi", "starlette", "uvicorn", "app.api", "httpx", "websockets", "app.outbound")


def module_name(path: Path) -> str:
    """``app.broker.core`` for app/broker/core.py (``app.broker`` for its __init__.py)."""
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_imported_modules(path: Path, module: str | None = None) -> set[str]:
    """What :func:`imported_modules` finds, and also the names a ``from`` import takes out of a
    package (``from app import outbound``) and relative imports, made absolute (``module``: the
    file's own module name, by default from its place under app/)."""
    found = set(imported_modules(path))
    package = (module or module_name(path)).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package[: len(package) - (node.level - 1)]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.add(base)
        found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def forbidden_imports(path: Path, module: str | None = None) -> list[str]:
    return sorted(
        name
        for name in all_imported_modules(path, module)
        if any(name == root or name.startswith(root + ".") for root in FORBIDDEN)
    )


def test_the_broker_core_and_the_codec_import_no_web_framework_and_no_http_client() -> None:
    modules = [*sorted((APP / "broker").rglob("*.py")), APP / "codec.py"]
    assert len(modules) > 3
    offenders = {str(path.relative_to(APP)): bad for path in modules if (bad := forbidden_imports(path))}
    assert offenders == {}, f"the broker core imports HTTP: {offenders}"


def test_the_pusher_imports_no_web_framework_and_no_http_client() -> None:
    """Push subscriptions (app/push/) reach endpoints through the PushTransport they are handed."""
    modules = sorted((APP / "push").rglob("*.py"))
    assert len(modules) > 3
    offenders = {str(path.relative_to(APP)): bad for path in modules if (bad := forbidden_imports(path))}
    assert offenders == {}, f"the pusher imports HTTP: {offenders}"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text(
        "from starlette.responses import Response\nfrom app.api.errors import ApiError\nimport app.store\n"
    )
    assert forbidden_imports(module, "app.broker.bad") == [
        "app.api.errors",
        "app.api.errors.ApiError",
        "starlette.responses",
        "starlette.responses.Response",
    ]


def test_the_check_sees_an_http_client_or_the_outbound_adapter(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text(
        "import httpx\n"
        "from websockets.asyncio.client import connect\n"
        "from app.outbound.http import HttpOutbound\n"
        "from app import outbound\n"
        "from ...outbound import http\n"
        "from app.broker.outbound import Outbound\n"
        "from .ha_master import unframe\n"
    )
    # As if it were app/broker/sub/bad.py: a subpackage of the core is read too.
    assert forbidden_imports(module, "app.broker.sub.bad") == [
        "app.outbound",
        "app.outbound.http",
        "app.outbound.http.HttpOutbound",
        "httpx",
        "websockets.asyncio.client",
        "websockets.asyncio.client.connect",
    ]
