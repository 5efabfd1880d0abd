"""The documentation's examples, read from its Markdown: every fenced ``sh``/``console`` block that
calls curl and every ``python`` block of docs/**/*.md and README.md.

A block runs as it is shown, with the broker's address in place of ``127.0.0.1:8080`` (or
``localhost:8080``). A ``# -> text`` line states what the command before it answers: its output must
contain ``text`` (whitespace aside; ``...`` stands for anything). A block that cannot run here (a
cluster of machines, a placeholder to fill in) is preceded by ``<!-- skip: reason -->``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = ("sh", "console", "python")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<lang>[\w-]*)\s*$")
SKIP = re.compile(r"^\s*<!--\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")
EXPECT = "# -> "
ADDRESSES = ("127.0.0.1:8080", "localhost:8080")


@dataclass
class Command:
    """One command of a shell block (continuation lines joined), or a whole Python block."""

    text: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    lang: str
    code: str
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang == "python" or (self.lang in ("sh", "console") and "curl" in self.code)

    def commands(self) -> list[Command]:
        if self.lang == "python":
            return [
                Command(
                    self.code,
                    [
                        line.strip()[len(EXPECT) :]
                        for line in self.code.splitlines()
                        if line.strip().startswith(EXPECT)
                    ],
                )
            ]
        commands: list[Command] = []
        pending = ""
        for raw in self.code.splitlines():
            line = raw.removeprefix("$ ") if self.lang == "console" else raw
            stripped = line.strip()
            if not pending and stripped.startswith(EXPECT):
                if not commands:
                    raise ValueError(f"{self.name}: a '# ->' line before any command")
                commands[-1].expected.append(stripped[len(EXPECT) :])
                continue
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            commands.append(Command(pending + line))
            pending = ""
        if pending:
            commands.append(Command(pending))
        return commands


def markdown_files() -> list[Path]:
    pages = sorted(path for path in (ROOT / "docs").rglob("*.md") if "hooks" not in path.parts)
    return [ROOT / "README.md", *pages]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of one page, with the skip mark before it, if any."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening or not opening["lang"]:
            index += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        end = index + 1
        while end < len(lines) and lines[end].strip() != fence:
            body.append(lines[end][len(indent) :] if lines[end].startswith(indent) else lines[end].lstrip())
            end += 1
        before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        mark = SKIP.match(before)
        found.append(
            Block(path, index + 1, opening["lang"], "\n".join(body) + "\n", mark["reason"] if mark else None)
        )
        index = end + 1
    return found


def runnable_blocks(path: Path) -> list[Block]:
    return [block for block in blocks(path) if block.runnable]


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def matches(expected: str, output: str) -> bool:
    """Whether ``output`` contains ``expected``, whitespace aside, ``...`` matching anything."""
    pattern = ".*?".join(re.escape(part) for part in squeeze(expected).split("..."))
    return re.search(pattern, squeeze(output), re.DOTALL) is not None


def with_address(code: str, address: str) -> str:
    for documented in ADDRESSES:
        code = code.replace(documented, address)
    return code
