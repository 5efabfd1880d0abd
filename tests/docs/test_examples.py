"""Every runnable example of the documentation, run against a real broker: one broker per page, the
page's blocks in order (a page's later examples read what its earlier ones produced).

A command fails its page when it exits non-zero, when its output lacks a ``# ->`` line shown beside
it, or when it answers an error envelope that the page does not show (a ``# -> "error_code":...``
line). See tests/docs/examples.py for how blocks are read and marked.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.server import BrokerProcess
from tests.docs.examples import ROOT, Block, blocks, markdown_files, matches, runnable_blocks, with_address

PAGES = [path for path in markdown_files() if any(block.skip is None for block in runnable_blocks(path))]
BLOCK_TIMEOUT_S = 60
MARKER = "@@wharf-example-"


class BrokerSupply:
    """A fresh broker for each page, the next one starting while a page's examples run (a start is
    most of a page's time). Each broker's store is removed once its page is done."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = 0
        self.starter = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.upcoming = self._start()

    def _start(self) -> concurrent.futures.Future[BrokerProcess]:
        self.started += 1
        directory = self.root / f"page-{self.started}"
        directory.mkdir()
        process = BrokerProcess(directory / "store")
        return self.starter.submit(process.start)

    def take(self) -> BrokerProcess:
        """The broker started for this page (what its start raised fails this page alone)."""
        upcoming, self.upcoming = self.upcoming, self._start()
        return upcoming.result()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.upcoming.result().stop()
        self.starter.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def supply(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerSupply]:
    brokers = BrokerSupply(tmp_path_factory.mktemp("brokers"))
    yield brokers
    brokers.close()


@pytest.fixture
def page_broker(supply: BrokerSupply) -> Iterator[BrokerProcess]:
    process = supply.take()
    yield process
    process.stop()
    shutil.rmtree(process.store_dir.parent, ignore_errors=True)


def environment(broker: BrokerProcess) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    python_path = os.pathsep.join([str(ROOT), str(ROOT / "clients/python")])
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": python_path,
        "WHARF_URL": broker.url,
    }


def run_block(block: Block, broker: BrokerProcess, workdir: Path) -> None:
    """Runs one block: a Python block as a script, a shell block as one bash script (so a command may
    use a variable an earlier one set) with a marker printed before each command to split the output."""
    address = broker.url.removeprefix("http://")
    commands = block.commands()
    if block.lang == "python":
        script = workdir / "example.py"
        script.write_text(with_address(commands[0].text, address))
        argv = [sys.executable, str(script)]
    else:
        lines = ["set -eo pipefail"]
        for index, command in enumerate(commands):
            lines += [f"printf '\\n{MARKER}%d\\n' {index}", with_address(command.text, address)]
        argv = ["bash", "-c", "\n".join(lines)]
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=environment(broker),
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        check=False,
    )
    outputs = (
        re.split(rf"^{MARKER}\d+$", done.stdout, flags=re.MULTILINE)[1:]
        if block.lang != "python"
        else [done.stdout]
    )
    ran = len(outputs)
    failed = commands[ran - 1].text.strip()[:300] if ran else ""
    assert done.returncode == 0, (
        f"{block.name}: {failed}\nexited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    for command, output in zip(commands, outputs, strict=False):
        where = f"{block.name}: {command.text.strip()[:300]}"
        for expected in command.expected:
            assert matches(expected, output), f"{where}\nexpected: {expected}\nanswered: {output}"
        if '"error_code"' in output:
            shown = any("error_code" in expected for expected in command.expected)
            assert shown, f"{where}\nanswered an error the page does not show: {output}"
    assert ran == len(commands), f"{block.name}: ran {ran} of {len(commands)} commands\n{done.stderr}"


@pytest.mark.parametrize("page", PAGES, ids=[str(path.relative_to(ROOT)) for path in PAGES])
def test_page_examples_run(page: Path, page_broker: BrokerProcess, tmp_path: Path) -> None:
    for block in runnable_blocks(page):
        if block.skip is None:
            run_block(block, page_broker, tmp_path)


def test_examples_are_found() -> None:
    """The collector sees the examples: the README's taste and the consume guide's blocks."""
    readme = runnable_blocks(ROOT / "README.md")
    assert readme and all(block.skip is None for block in readme)
    consume = runnable_blocks(ROOT / "docs/guides/consume.md")
    assert [block.lang for block in consume].count("python") == 1
    assert sum(len(block.commands()) for block in consume if block.lang == "sh") >= 8


def test_few_examples_are_skipped() -> None:
    """Skips are marked by name and few: at most one runnable example in ten."""
    every = [block for path in markdown_files() for block in blocks(path) if block.runnable]
    skipped = [block.name for block in every if block.skip is not None]
    assert len(skipped) * 10 <= len(every), skipped
