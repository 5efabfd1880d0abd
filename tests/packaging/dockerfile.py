"""Reading the Dockerfile's stages, so that tests run the very commands the image runs."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from tests.api.server import ROOT

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def arguments(self, keyword: str) -> list[str]:
        """The arguments of every ``keyword`` instruction, in order."""
        return [arguments for name, arguments in self.instructions if name == keyword]

    def env(self) -> dict[str, str]:
        """ENV and ARG defaults, in order (``$NAME`` in a value is not expanded)."""
        values: dict[str, str] = {}
        for name, arguments in self.instructions:
            if name in ("ENV", "ARG"):
                for assignment in shlex.split(arguments):
                    key, _, value = assignment.partition("=")
                    values[key] = value
        return values

    def copies(self) -> list[tuple[list[str], str]]:
        """(sources, destination) of each COPY from the build context."""
        result = []
        for arguments in self.arguments("COPY"):
            words = [word for word in shlex.split(arguments) if not word.startswith("--")]
            if "--from=" not in arguments:
                result.append((words[:-1], words[-1]))
        return result

    def command(self) -> list[str]:
        (arguments,) = self.arguments("CMD")
        return list(json.loads(arguments))

    def healthcheck(self) -> tuple[list[str], str]:
        """The HEALTHCHECK's command and options."""
        (arguments,) = self.arguments("HEALTHCHECK")
        options, _, command = arguments.partition(" CMD ")
        return list(json.loads(command)), options


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: continuation lines joined, comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, arguments = (pending + stripped).partition(" ")
        result.append((keyword.upper(), arguments.strip()))
        pending = ""
    return result


def stages(path: Path = DOCKERFILE) -> list[Stage]:
    result: list[Stage] = []
    for keyword, arguments in instructions(path.read_text()):
        if keyword == "FROM":
            words = arguments.split()
            result.append(Stage(words[0], words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        else:
            result[-1].instructions.append((keyword, arguments))
    return result
