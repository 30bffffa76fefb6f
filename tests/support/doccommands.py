"""The ``console`` blocks of the user docs (README.md, docs/install.md) as commands a test
can run as written.

Owns: finding each ```` ```console ```` block and the marker on the line before it, which
says what running it needs (an HTML comment, invisible once rendered):

* ``<!-- console: offline -->``: nothing but this checkout (the virtualenv's ``pdscaler``,
  the lab build's ``helm``): tests/unit/test_doc_console.py runs it;
* ``<!-- console: settings -->``: ``export`` lines a reader changes for their cluster (the
  tests set their own values);
* ``<!-- console: images -->``: a container builder and a registry: the unit test runs it
  with ``DRY_RUN=1`` (the commands are printed, nothing is built);
* ``<!-- console: cluster -->``: a cluster: tests/lab/test_readme_quickstart.py runs
  README's, in order, against a fresh lab.

A command is a ``$ `` line with its ``\\`` continuation lines (kept as the shell reads
them); the ``# `` lines after it, up to the next command, are what it prints (in short).
Must not: run anything (the tests do). Example::

    <!-- console: offline -->
    ```console
    $ pdscaler plan ratio --rate 20 ...
    # N_P 19.05 -> 20 replicas
    ```
    -> Block(path=README.md, line=142, need="offline",
             commands=[Command("pdscaler plan ratio --rate 20 ...", ["N_P 19.05 -> 20 replicas"])])
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "README.md", REPO / "docs" / "install.md")
NEEDS = ("offline", "settings", "images", "cluster")
MARKER = re.compile(r"^<!-- console: (\w+) -->$")


@dataclass(frozen=True)
class Command:
    shell: str  # the command as the shell reads it (continuations joined with "\\\n")
    says: list[str] = field(default_factory=list)  # its "# " output lines, "# " dropped


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    need: str | None  # the marker's word; None: no marker
    commands: list[Command]


def _commands(body: list[str]) -> list[Command]:
    out: list[Command] = []
    shell: list[str] = []
    says: list[str] = []
    for line in body:
        if shell and shell[-1].endswith("\\"):
            shell.append(line)
        elif line.startswith("$ "):
            if shell:
                out.append(Command("\n".join(shell), says))
            shell, says = [line[2:]], []
        elif line.startswith("# ") or line == "#":
            says.append(line[2:])
    if shell:
        out.append(Command("\n".join(shell), says))
    return out


def blocks(path: Path) -> list[Block]:
    """Every ```console block of ``path`` with its marker (module docstring)."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```console":
            start = i
            marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            out.append(Block(path, start + 1, marker.group(1) if marker else None,
                             _commands(body)))  # fmt: skip
        i += 1
    return out


def markers(path: Path) -> list[tuple[int, str]]:
    """Every marker line of ``path`` (1-based line, word), used or not."""
    found = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = MARKER.match(line.strip())
        if m:
            found.append((n, m.group(1)))
    return found


def of(path: Path, need: str) -> list[Block]:
    return [b for b in blocks(path) if b.need == need]
