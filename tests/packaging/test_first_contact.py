"""What a newcomer meets first: `/` leads to the console, the start-up line says where everything
is, a broker bound to every interface advertises an address clients reach, and a bad setting is
one line and exit status 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic_settings import SettingsError

from app.address import reachable_ipv4
from app.cli import describe_invalid_settings, load_settings
from app.settings import Settings
from app.store.record_format import decode_host
from tests.api.server import ROOT, BrokerProcess, free_port


def test_the_front_door_leads_to_the_console(client: httpx.Client) -> None:
    answer = client.get("/")
    assert answer.is_redirect and answer.headers["location"] == "/console/"
    assert "<title>Wharf" in client.get("/", follow_redirects=True).text


def test_the_start_up_line_says_where_the_api_console_and_docs_are(broker: BrokerProcess) -> None:
    (line,) = [line for line in broker.log().splitlines() if "console http" in line]
    base = broker.url
    assert f"API {base}/v1/" in line
    assert f"console {base}/console/" in line
    assert f"docs {base}/docs" in line


# --- the advertised address -----------------------------------------------------------------------


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::"])
def test_a_wildcard_host_advertises_an_address_of_this_machine(wildcard: str) -> None:
    advertised = Settings(host=wildcard, port=9876).resolved_advertised_url
    assert advertised == f"http://{reachable_ipv4()}:9876"
    assert reachable_ipv4() not in ("0.0.0.0", "")
    with socket.socket() as probe:  # an address of one of this machine's interfaces
        probe.bind((reachable_ipv4(), 0))


def test_the_advertised_url_given_wins_and_may_not_be_a_wildcard() -> None:
    given = "http://broker.example:18080"
    assert Settings(host="0.0.0.0", advertised_url=given).resolved_advertised_url == given
    assert Settings(host="10.1.2.3", port=81).resolved_advertised_url == "http://10.1.2.3:81"
    for unreachable in ("http://0.0.0.0:8080", "http://[::]:8080", "10.0.0.7:8080", "http://h:port"):
        with pytest.raises(ValueError, match="advertised_url"):
            Settings(advertised_url=unreachable)


def test_a_broker_on_every_interface_hands_out_ids_and_routes_clients_can_reach(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", host="0.0.0.0").start()
    try:
        produced = httpx.post(f"{broker.url}/v1/topics/anywhere/messages", json={"body": "x"}).json()
        msg_id = produced["results"][0]["msg_id"]
        assert decode_host(bytes.fromhex(msg_id[:16])) == (reachable_ipv4(), broker.port)
        advertised = f"http://{reachable_ipv4()}:{broker.port}"
        route = httpx.get(f"{broker.url}/v1/topics/anywhere/route").json()
        assert route["broker_datas"][0]["addresses"] == {"0": advertised}
        # ... and it is reachable there: the broker answers its own id at its advertised address.
        assert httpx.get(f"{advertised}/v1/messages/{msg_id}").status_code == 200
        assert f"routes and message ids carry {advertised}" in broker.log()
    finally:
        broker.stop()


def test_a_broker_advertised_at_an_ipv6_address_says_what_its_message_ids_carry(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", host="::1")
    broker.url = f"http://[::1]:{broker.port}"
    broker.start()
    try:
        produced = httpx.post(f"{broker.url}/v1/topics/anywhere/messages", json={"body": "x"}).json()
        msg_id = produced["results"][0]["msg_id"]
        assert decode_host(bytes.fromhex(msg_id[:16])) == ("0.0.0.0", broker.port)
        assert httpx.get(f"{broker.url}/v1/messages/{msg_id}").json()["body"] == "x"
        (line,) = [line for line in broker.log().splitlines() if "has no IPv4 address" in line]
        assert line == (
            f"wharf: the advertised address {broker.url} has no IPv4 address: message ids carry "
            f"0.0.0.0:{broker.port} (their IPv6 form is not written), so a lookup by id cannot tell "
            "this broker from another such one on the same port (set WHARF_ADVERTISED_URL to an "
            "IPv4 address, or a name that resolves to one)"
        )
    finally:
        broker.stop()


def test_a_broker_advertised_at_an_ipv4_address_warns_of_nothing(broker: BrokerProcess) -> None:
    assert "wharf: " not in broker.log()


# --- the options of serve ------------------------------------------------------------------------


def test_the_options_of_serve_and_healthcheck_win_over_their_variables(tmp_path: Path) -> None:
    port, store = free_port(), tmp_path / "from-the-option"
    # WHARF_PORT and WHARF_STORE_DIR name another port, where nothing listens, and another directory.
    broker = BrokerProcess(
        tmp_path / "from-the-variable", args=["serve", "--port", str(port), "--store-dir", str(store)]
    )
    broker.url = f"http://127.0.0.1:{port}"
    broker.start()
    try:
        assert (store / "checkpoint").exists()
        assert not broker.store_dir.exists()
        assert httpx.get(f"{broker.url}/readyz").status_code == 200

        def healthcheck(*options: str) -> int:
            return subprocess.run(
                [sys.executable, "-m", "app", "healthcheck", *options],
                cwd=ROOT,
                env=broker.env,
                capture_output=True,
                timeout=60,
            ).returncode

        assert healthcheck("--port", str(port)) == 0
        assert healthcheck() == 1  # WHARF_PORT's port
    finally:
        broker.stop()
    done = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", "70000"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2 and "70000 is not in the range 0<=x<=65535" in done.stderr


# --- bad settings ---------------------------------------------------------------------------------


def test_a_bad_setting_stops_the_broker_with_one_line_and_exit_status_2() -> None:
    env = {"PATH": "/usr/bin:/bin", "WHARF_STORE_DIR": "/nonexistent/never-created", "WHARF_PORT": "eighty"}
    done = subprocess.run(
        [sys.executable, "-m", "app", "serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "wharf: WHARF_PORT='eighty' is not allowed: Input should be a valid integer, "
        "unable to parse string as an integer"
    ]


@pytest.mark.parametrize(
    ("variable", "value", "allowed"),
    [
        ("WHARF_PORT", "70000", "less than or equal to 65535"),
        ("WHARF_FLUSH_MODE", "SOMETIMES", "'ASYNC' or 'SYNC'"),
        ("WHARF_DELETE_WHEN", "4am", "should match pattern"),
        ("WHARF_ADVERTISED_URL", "http://0.0.0.0:8080", "an address clients can reach"),
    ],
)
def test_the_line_names_the_variable_the_value_and_what_is_allowed(
    variable: str,
    value: str,
    allowed: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exited:
        load_settings()
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"wharf: {variable}={value!r} is not allowed: ")
    assert allowed in line


def test_every_bad_setting_gets_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_PORT", "-1")
    monkeypatch.setenv("WHARF_BROKER_ID", "first")
    with pytest.raises(SystemExit) as exited:
        load_settings()
    assert exited.value.code == 2
    try:
        Settings()
    except ValueError as error:
        lines = describe_invalid_settings(error)  # type: ignore[arg-type]
    assert [line.split("=")[0] for line in lines] == ["WHARF_PORT", "WHARF_BROKER_ID"]


class ListSettings(Settings):
    origins: list[str] = []


def test_a_value_that_cannot_be_parsed_is_named_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings of lists and maps are parsed as JSON by pydantic-settings, before validation."""
    monkeypatch.setenv("WHARF_ORIGINS", "[not json")
    with pytest.raises(SettingsError) as raised:
        ListSettings()
    (line,) = describe_invalid_settings(raised.value)
    assert line.startswith("WHARF_ORIGINS='[not json' cannot be parsed: ")
