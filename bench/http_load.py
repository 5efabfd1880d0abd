"""Load generation and measurement for the HTTP benchmark: wrk runs, raw HTTP/1.1 clients, processes.

* :func:`run_wrk` drives a URL with ``wrk`` (a C load generator: keep-alive connections, its own
  threads) and a Lua script written by :func:`post_script` or :func:`pull_script`; it returns what
  wrk counted, and the server's CPU time over the run (``/proc/<pid>/stat``).
* :class:`RawConnection` is a blocking HTTP/1.1 keep-alive connection that sends a request and reads
  its answer byte by byte as it arrives, so two of them under one ``selectors`` loop time two
  answers against one clock (the long-poll wake latency).
* :func:`open_request` / :func:`read_answer` are the same on asyncio streams, cheap enough for
  thousands of held pulls in one process.
* :class:`BareServer` runs ``bench.bare_app`` under uvicorn with the broker's flags.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- the server process ----------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # After the command name: state is field 3, utime 14 and stime 15 (1-based, man 5 proc).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def raise_fd_limit() -> int:
    """Raise this process's open-file limit to its hard limit (children inherit it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# What a BareServer runs: the FastAPI route, the raw ASGI callable (both under uvicorn with the
# broker's flags) or the protocol below ASGI (bench.bare_protocol).
BARE_KINDS = ("fastapi", "asgi", "protocol")


class BareServer:
    """``uvicorn bench.bare_app:app`` with uvloop, httptools and one worker, like the broker; with
    ``kind="asgi"``, ``bench.bare_app:asgi`` the same way; with ``kind="protocol"``,
    ``python -m bench.bare_protocol``."""

    def __init__(self, log_path: Path, kind: str = "fastapi") -> None:
        if kind not in BARE_KINDS:
            raise ValueError(f"kind must be one of {BARE_KINDS}, not {kind!r}")
        self.kind = kind
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout_s: float = 30.0) -> BareServer:
        if self.kind == "protocol":
            command = [sys.executable, "-m", "bench.bare_protocol", "--port", str(self.port)]
        else:
            command = self.uvicorn_command()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"bare {self.kind} server exited with {self.process.returncode}")
            try:
                if httpx.post(f"{self.url}/v1/topics/t/messages", content=b"x", timeout=1.0).is_success:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"bare {self.kind} server did not answer in {timeout_s} s")

    def uvicorn_command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.bare_app:app" if self.kind == "fastapi" else "bench.bare_app:asgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--workers",
            "1",
            "--log-level",
            "warning",
        ]

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


# -- wrk -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WrkRun:
    """What one wrk run counted, and the server's CPU over it."""

    requests: int
    seconds: float
    bytes_read: float
    non_2xx: int
    socket_errors: int
    latency_ms: dict[str, float]  # "avg", "p50", "p90", "p99"
    server_cpu_s: float

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds

    @property
    def server_cores(self) -> float:
        """Server CPU time over wall time: 1.0 is one core busy throughout."""
        return self.server_cpu_s / self.seconds

    @property
    def cpu_us_per_request(self) -> float:
        return self.server_cpu_s / self.requests * 1e6 if self.requests else float("nan")


def wrk_path() -> str | None:
    return shutil.which("wrk")


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}
_SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def _duration_ms(text: str) -> float:
    found = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if found is None:
        raise ValueError(f"unreadable wrk duration {text!r}")
    return float(found[1]) * _UNITS[found[2]]


def parse_wrk(output: str, server_cpu_s: float) -> WrkRun:
    """Read wrk's report (run with ``--latency``)."""
    total = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m), ([\d.]+)([KMGT]?B) read", output)
    if total is None:
        raise RuntimeError(f"unreadable wrk output:\n{output}")
    latency = {"avg": _duration_ms(re.search(r"Latency\s+(\S+)", output)[1])}  # type: ignore[index]
    for percentile in ("50", "90", "99"):
        found = re.search(rf"^\s+{percentile}%\s+(\S+)", output, re.MULTILINE)
        if found:
            latency[f"p{percentile}"] = _duration_ms(found[1])
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return WrkRun(
        requests=int(total[1]),
        seconds=_duration_ms(total[2] + total[3]) / 1000,
        bytes_read=float(total[4]) * _SIZE_UNITS[total[5]],
        non_2xx=int(non_2xx[1]) if non_2xx else 0,
        socket_errors=sum(int(n) for n in errors.groups()) if errors else 0,
        latency_ms=latency,
        server_cpu_s=server_cpu_s,
    )


def run_wrk(
    url: str, script: Path, seconds: float, connections: int, threads: int, server_pid: int
) -> WrkRun:
    """Drive ``url`` with wrk for ``seconds``; fails on any non-2xx answer or socket error."""
    executable = wrk_path()
    if executable is None:
        raise RuntimeError("wrk is not installed (apt-get install -y wrk)")
    command = [
        executable,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "30s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    before = cpu_seconds(server_pid)
    finished = subprocess.run(command, capture_output=True, text=True, check=False)
    used = cpu_seconds(server_pid) - before
    if finished.returncode != 0:
        raise RuntimeError(f"wrk failed ({finished.returncode}):\n{finished.stdout}\n{finished.stderr}")
    run = parse_wrk(finished.stdout, used)
    if run.non_2xx or run.socket_errors:
        raise RuntimeError(
            f"wrk saw {run.non_2xx} non-2xx answers and {run.socket_errors} socket errors on {url}:\n"
            f"{finished.stdout}"
        )
    return run


def _lua_string(text: str) -> str:
    return "[==[" + text + "]==]"


def post_script(path: Path, body_file: Path, content_type: str) -> Path:
    """A wrk script POSTing the bytes of ``body_file`` with ``content_type`` on every request."""
    path.write_text(
        f"""local file = assert(io.open({_lua_string(str(body_file))}, "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = {_lua_string(content_type)}
"""
    )
    return path


def pull_script(path: Path, topic: str, queues: int, slots: int, batch: int, accept: str) -> Path:
    """A wrk script GETting ``batch`` messages per request, cycling over queues and over ``slots``
    offsets (0, batch, 2 * batch, ...), each thread from its own starting point."""
    path.write_text(
        f"""local counter = 1
function setup(thread)
   thread:set("start", counter * 7919)
   counter = counter + 1
end
local n = nil
local headers = {{["Accept"] = {_lua_string(accept)}}}
function request()
   if n == nil then n = start end
   local queue = n % {queues}
   local slot = math.floor(n / {queues}) % {slots}
   n = n + 1
   local path = string.format("/v1/topics/{topic}/queues/%d/messages?offset=%d&max_messages={batch}",
                              queue, slot * {batch})
   return wrk.format("GET", path, headers)
end
"""
    )
    return path


# -- raw HTTP/1.1 ----------------------------------------------------------------------------------


def request_bytes(
    method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, host: str = "127.0.0.1"
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body or method in ("POST", "PUT"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _split_head(buffer: bytes) -> tuple[int, int, int] | None:
    """(status, header length, content length) once the head is in ``buffer``."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].decode("latin-1")
    status = int(head.split(" ", 2)[1])
    length = 0
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
        elif name.strip().lower() == "transfer-encoding":
            raise RuntimeError("chunked answers are not expected here")
    return status, end + 4, length


class RawConnection:
    """One keep-alive HTTP/1.1 connection; :meth:`poll` reads what arrived without blocking."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""
        self.answer: tuple[int, bytes] | None = None
        self.answered_at = 0.0

    def send(self, request: bytes) -> None:
        self.answer = None
        self.sock.setblocking(True)
        self.sock.sendall(request)
        self.sock.setblocking(False)

    def poll(self) -> bool:
        """Read what is there; True once a whole answer is in (``answer``, ``answered_at``)."""
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.buffer += chunk
        head = _split_head(self.buffer)
        if head is None:
            return False
        status, start, length = head
        if len(self.buffer) < start + length:
            return False
        self.answered_at = time.perf_counter()
        self.answer = (status, self.buffer[start : start + length])
        self.buffer = self.buffer[start + length :]
        return True

    def call(self, request: bytes, timeout_s: float = 10.0) -> tuple[int, bytes]:
        """Send and wait for the answer (blocking)."""
        self.send(request)
        wait_all([self], timeout_s)
        assert self.answer is not None
        return self.answer

    def close(self) -> None:
        self.sock.close()


def wait_all(connections: list[RawConnection], timeout_s: float) -> None:
    """Poll ``connections`` until each has its whole answer, stamping each as it completes."""
    pending = {
        connection.sock.fileno(): connection for connection in connections if connection.answer is None
    }
    with selectors.DefaultSelector() as selector:
        for connection in pending.values():
            selector.register(connection.sock, selectors.EVENT_READ)
        deadline = time.perf_counter() + timeout_s
        while pending:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError(f"{len(pending)} answers did not arrive in {timeout_s} s")
            for key, _ in selector.select(remaining):
                ready = pending.get(key.fd)
                if ready is not None and ready.poll():
                    selector.unregister(ready.sock)
                    del pending[key.fd]


# -- asyncio streams -------------------------------------------------------------------------------


async def open_request(port: int, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect and send ``request``; the streams, for :func:`read_answer`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    return reader, writer


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, float]:
    """Status, body and the perf_counter time the whole answer was in."""
    head = await reader.readuntil(b"\r\n\r\n")
    parsed = _split_head(head)
    assert parsed is not None
    status, _, length = parsed
    body = await reader.readexactly(length) if length else b""
    return status, body, time.perf_counter()
