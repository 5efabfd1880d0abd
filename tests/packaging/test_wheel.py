"""The package runs away from the checkout.

The wheel is built and installed the way the image's build stage does it (the Dockerfile's COPY
lines give the source tree, its RUN line runs docker/install.sh), then the image's start command
runs with the image's environment from an empty directory, on SQLite and on PostgreSQL: the
console, the docs and their assets, a produce and a pull answer, and the image's health check
passes while the broker runs and fails once it stopped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from app.routing.schema import head_revision
from app.store.record_format import decode_host
from tests.api.server import ROOT, free_port
from tests.packaging.dockerfile import stages

pytestmark = pytest.mark.slow

BUILD, RUNTIME = stages()
# What the store would otherwise allocate whole (1 GiB CommitLog segments, a 420 MB index file).
SMALL_STORE = {
    "WHARF_COMMITLOG_FILE_SIZE": str(1024 * 1024),
    "WHARF_MAX_HASH_SLOTS": "16384",
    "WHARF_MAX_INDEX_COUNT": "65536",
}


def clean_environment() -> dict[str, str]:
    """This process's environment without anything that would lead a child to the checkout."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("WHARF_") and name not in dropped
    }


@dataclass
class Installation:
    venv: Path
    runtime_env: dict[str, str]  # the image's ENV, its paths moved to this venv


def copy_build_context(workdir: Path) -> None:
    """Copy into ``workdir`` what the build stage's COPY lines copy into its WORKDIR."""
    for sources, destination in BUILD.copies():
        for source in sources:
            origin = ROOT / source
            target = (
                workdir / destination / origin.name if destination.endswith("/") else workdir / destination
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(origin, target)


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory) -> Installation:
    root = tmp_path_factory.mktemp("image")
    workdir, venv = root / "src", root / "venv"
    copy_build_context(workdir)
    build_env = BUILD.env()
    image_venv = build_env["WHARF_VENV"]
    build_env["WHARF_VENV"] = str(venv)
    # The image keeps no pip cache; here pip's cache keeps the test's download time down.
    del build_env["PIP_NO_CACHE_DIR"]
    env = clean_environment() | build_env
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for command in BUILD.arguments("RUN"):
        done = subprocess.run(
            ["sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    runtime_env = {
        name: value.replace(image_venv, str(venv)).replace("$PATH", os.environ["PATH"])
        for name, value in RUNTIME.env().items()
    }
    return Installation(venv, runtime_env)


class InstalledBroker:
    """The image's CMD in ``volume`` (its WORKDIR and store), with the image's environment."""

    def __init__(self, installation: Installation, volume: Path, **settings: str) -> None:
        volume.mkdir()
        self.volume = volume
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = clean_environment() | installation.runtime_env | SMALL_STORE | settings
        self.env.update({"WHARF_STORE_DIR": str(volume), "WHARF_PORT": str(self.port)})
        self.stderr_path = volume.parent / f"{volume.name}.stderr"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> str:
        """Start the broker; its start-up line, printed once it listens."""
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                RUNTIME.command(),
                cwd=self.volume,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the broker exited with {self.process.wait()}:\n{self.stderr_path.read_text()}"
        return line.strip()

    def healthcheck(self) -> int:
        command, _ = RUNTIME.healthcheck()
        return subprocess.run(
            command, cwd=self.volume, env=self.env, capture_output=True, timeout=30
        ).returncode

    def stop(self) -> None:
        """Stop the broker as `docker stop` does, and check that it shut down cleanly."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        # Uvicorn shuts down, then re-raises the signal it caught.
        assert self.process.wait(30) in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in self.stderr_path.read_text()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.process = None


@pytest.fixture
def run_broker(installation: Installation, tmp_path: Path) -> Iterator[Callable[..., InstalledBroker]]:
    started: list[InstalledBroker] = []

    def make(**settings: str) -> InstalledBroker:
        broker = InstalledBroker(installation, tmp_path / "volume", **settings)
        started.append(broker)
        return broker

    yield make
    for broker in started:
        if broker.process is not None:
            broker.process.kill()
            broker.process.wait()


def check_first_contact(broker: InstalledBroker, line: str) -> None:
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        front = client.get("/")
        assert front.is_redirect and front.headers["location"] == "/console/"
        console = client.get("/console/")
        assert console.status_code == 200 and "<title>Wharf" in console.text
        assert client.get("/console/console.js").status_code == 200
        # The console's copy of @wharf/client (clients/js), which it imports: in the wheel, as JavaScript.
        client_module = client.get("/console/vendor/wharf-client/index.js")
        assert client_module.status_code == 200 and "export function createClient" in client_module.text
        assert client_module.headers["content-type"].startswith(("text/javascript", "application/javascript"))
        for page, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
            html = client.get(page)
            assert html.status_code == 200 and f"/docs/assets/{asset}" in html.text
            assert "https://" not in html.text, f"{page} loads something from elsewhere"
            script = client.get(f"/docs/assets/{asset}")
            assert script.status_code == 200 and len(script.content) > 500_000
        produced = client.post("/v1/topics/packaged/messages", json={"body": "from the wheel", "queue_id": 0})
        assert produced.status_code == 200, produced.text
        (result,) = produced.json()["results"]
        assert result["status"] == "SEND_OK"
        pulled = client.get("/v1/topics/packaged/queues/0/messages", params={"offset": 0}).json()
        assert [message["body"] for message in pulled["messages"]] == ["from the wheel"]
    # The image listens on 0.0.0.0: ids and the start-up line carry an address clients can reach.
    host, port = decode_host(bytes.fromhex(result["msg_id"][:16]))
    assert host != "0.0.0.0" and port == broker.port
    assert f"console http://{host}:{broker.port}/console/" in line


def installed_python(installation: Installation, cwd: Path, code: str) -> str:
    """What ``code`` prints, run by the installed environment's python in ``cwd``."""
    return subprocess.run(
        ["python", "-c", code],
        cwd=cwd,
        env=clean_environment() | installation.runtime_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_the_installed_package_is_not_the_checkout_and_has_all_its_files(
    installation: Installation, tmp_path: Path
) -> None:
    where = installed_python(installation, tmp_path, "import app; print(app.__file__)").strip()
    assert Path(where).is_relative_to(installation.venv), where
    # The client the broker depends on (wharf-client, clients/python), installed from its wheel too.
    client = installed_python(
        installation, tmp_path, "import wharf_client; print(wharf_client.__file__)"
    ).strip()
    assert Path(client).is_relative_to(installation.venv) and (Path(client).parent / "py.typed").is_file(), (
        client
    )
    # Every file of the package is installed: the console, the migrations and their template, the
    # docs' assets and their licences.
    installed = Path(where).parent
    tracked = subprocess.run(["git", "ls-files", "app"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in tracked.stdout.split():
        assert (installed / Path(name).relative_to("app")).is_file(), f"the wheel lacks {name}"


def test_the_installed_package_runs_the_compiled_kernel(installation: Installation, tmp_path: Path) -> None:
    """The image's build stage compiles the kernel into the wheel (it has a C compiler)."""
    code = "from app.store import kernel; print(kernel.NAME, kernel.compiled.__file__)"
    name = installed_python(installation, tmp_path, code).split()
    assert name[0] == "compiled" and Path(name[1]).is_relative_to(installation.venv), name


def test_serves_from_an_empty_directory_on_sqlite(run_broker: Callable[..., InstalledBroker]) -> None:
    broker = run_broker()
    line = broker.start()
    check_first_contact(broker, line)
    assert (broker.volume / "wharf.db").is_file()
    assert broker.healthcheck() == 0
    broker.stop()
    assert broker.healthcheck() == 1


def test_serves_from_an_empty_directory_on_postgresql(
    run_broker: Callable[..., InstalledBroker], throwaway_postgres_url: str
) -> None:
    broker = run_broker(WHARF_DATABASE_URL=throwaway_postgres_url)
    line = broker.start()
    check_first_contact(broker, line)
    assert not (broker.volume / "wharf.db").exists()
    with psycopg.connect(throwaway_postgres_url.replace("+psycopg", "")) as connection:
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone() or (None,)
    assert revision == head_revision()
    assert broker.healthcheck() == 0
    broker.stop()
