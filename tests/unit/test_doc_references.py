"""The documentation a reader is sent to exists: every ``docs/design.md §N`` and
``docs/models.md §N`` in the code, the CLI's help and output (they are in the source),
the charts, the bench and the docs has a heading for section N in that file, also when
the reference is broken across two lines; a section number in parentheses with no file
name is only used inside docs/design.md and docs/models.md (where it names a section of
that document, which must exist); no reference names a design file outside the
repository (the bare upper-case names); and every relative link in README.md and
docs/*.md points to a file (and heading) that exists.

Worked example: ``Ratio model (docs/models.md §2)`` in ``pdscaler plan ratio``'s output
needs ``docs/models.md`` with a heading ``## 2. ...``; ``docs/design.md §3.5`` needs
``### 3.5 ...``; ``§3 step 5`` needs ``## 3. ...``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pdscaler.cli import build_app

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("operator", "bench", "tests", "docs", "charts", "deploy", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".tpl", ".json", ".sh", ".env", ".toml", ".txt"}
DOCS = {"design": ROOT / "docs" / "design.md", "models": ROOT / "docs" / "models.md"}

# `design.md §3.5`, `docs/models.md §2b`, `docs/design.md §3 step 5` (-> 3)
REFERENCE = re.compile(r"\b(design|models)\.md\s*§\s*(\d+[a-z]?(?:\.\d+)?)")
# `(§2b)`: a section with no file name (resolves only inside the document itself)
BARE_SECTION = re.compile(r"\(§\s*(\d+[a-z]?(?:\.\d+)?)")
# The design files by their old upper-case names, which are not in the repository.
BARE = re.compile(r"(?<![\w/])(DESIGN|MODELS)\.md")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def scanned_files() -> list[Path]:
    out: list[Path] = []
    for entry in SCANNED:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in candidates:
            if f.is_file() and f.suffix in TEXT_SUFFIXES and "__pycache__" not in f.parts:
                out.append(f)
    return out


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of a file; for markdown, outside fenced code blocks."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if path.suffix != ".md":
        return list(enumerate(lines, 1))
    out, fenced = [], False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def headings(path: Path) -> list[str]:
    return [m.group(2) for _, line in prose_lines(path) if (m := HEADING.match(line))]


def has_section(path: Path, section: str) -> bool:
    """A heading that starts with the section number: ``2. The ratio model``, ``2b. ...``,
    ``3.5 Bounds`` (``3`` does not match ``3.5 Bounds``: the number ends at a space)."""
    number = re.compile(rf"^{re.escape(section)}\.?\s")
    return any(number.match(text) for text in headings(path))


def slug(text: str) -> str:
    """GitHub's anchor of a heading: ``3.5 Bounds`` -> ``35-bounds``."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for text in headings(path):
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def find(pattern: re.Pattern[str], lines: list[tuple[int, str]]) -> list[re.Match[str]]:
    """The matches of ``pattern`` in ``lines`` read as one text, so a reference broken
    across a line (``docs/models.md`` at the end of one, ``§2c`` opening the next) is
    found; ``line_of`` gives a match's line number."""
    return list(pattern.finditer("\n".join(line for _, line in lines)))


def line_of(match: re.Match[str], lines: list[tuple[int, str]]) -> int:
    return lines[match.string.count("\n", 0, match.start())][0]


def references() -> list[tuple[str, str, str]]:
    """(where, file key, section) of every section reference in the scanned files."""
    found = []
    for f in scanned_files():
        lines = prose_lines(f)
        for m in find(REFERENCE, lines):
            where = f"{f.relative_to(ROOT)}:{line_of(m, lines)}"
            found.append((where, m.group(1), m.group(2)))
    return found


def bare_sections() -> list[tuple[str, Path, str]]:
    """(where, the file, section) of every ``(§N`` with no file name in the scanned
    files (this file's own examples aside)."""
    here = Path(__file__).resolve()
    found = []
    for f in scanned_files():
        if f.resolve() == here:
            continue
        lines = prose_lines(f)
        for m in find(BARE_SECTION, lines):
            found.append((f"{f.relative_to(ROOT)}:{line_of(m, lines)}", f, m.group(1)))
    return found


def test_a_reference_broken_across_a_line_and_a_bare_section_are_found() -> None:
    lines = [(7, "    replicas for bursts (docs/models.md"), (8, "    §2c), within maxGPUs")]
    (ref,) = find(REFERENCE, lines)
    assert (ref.group(1), ref.group(2), line_of(ref, lines)) == ("models", "2c", 7)
    lines = [(3, "Owns: ratio (§2), drain (docs/models.md §3)")]
    assert [m.group(1) for m in find(BARE_SECTION, lines)] == ["2"]


def test_the_design_documents_exist_with_their_sections() -> None:
    """§1-§6 of the design and §1-§10 (and §2b) of the models, as the code cites them."""
    for key, path in DOCS.items():
        assert path.is_file(), f"docs/{key}.md is missing"
    for section in ("1", "2", "3", "3.5", "4", "5", "6"):
        assert has_section(DOCS["design"], section), f"docs/design.md has no §{section}"
    for section in (*(str(n) for n in range(1, 11)), "2b"):
        assert has_section(DOCS["models"], section), f"docs/models.md has no §{section}"


def test_every_section_reference_resolves() -> None:
    refs = references()
    assert len(refs) >= 30, f"expected the code's ~50 references, found {len(refs)}"
    broken = [
        f"{where}: docs/{key}.md §{section}"
        for where, key, section in refs
        if not has_section(DOCS[key], section)
    ]
    assert not broken, "references to sections without a heading:\n" + "\n".join(broken)


def test_a_section_without_a_file_name_is_only_used_inside_its_document() -> None:
    """``(§2b)`` in the CLI's help sends a user nowhere: write ``docs/models.md §2b``.
    Inside docs/models.md, ``(§4)`` is that document's §4, which must exist."""
    own = {path.resolve() for path in DOCS.values()}
    outside = [where for where, f, _ in bare_sections() if f.resolve() not in own]
    assert not outside, "name the document (docs/models.md §N):\n" + "\n".join(outside)
    broken = [
        f"{where}: §{section}"
        for where, f, section in bare_sections()
        if f.resolve() in own and not has_section(f, section)
    ]
    assert not broken, "sections of their own document without a heading:\n" + "\n".join(broken)


def test_no_reference_to_design_files_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    bare = [
        f"{f.relative_to(ROOT)}:{number}: {line.strip()}"
        for f in scanned_files()
        if f.resolve() != here
        for number, line in enumerate(f.read_text(errors="replace").splitlines(), 1)
        if BARE.search(line)
    ]
    assert not bare, "use docs/design.md / docs/models.md:\n" + "\n".join(bare)


def test_the_calculator_points_to_the_models_document() -> None:
    """What a user reads: ``pdscaler plan --help`` and a calculator's table title."""
    runner = CliRunner()
    help_text = runner.invoke(build_app(), ["plan", "--help"]).stdout
    table = runner.invoke(
        build_app(), ["plan", "drain", "--arrival", "3.5", "--startup", "10", "--service", "4.55"]
    ).stdout
    assert "docs/models.md" in help_text
    sections = REFERENCE.findall(table)
    assert sections == [("models", "3")], table
    assert has_section(DOCS["models"], "3")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files_and_headings_that_exist(doc: Path) -> None:
    broken = []
    for number, line in prose_lines(doc):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            if not dest.exists():
                broken.append(f"{doc.name}:{number}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{doc.name}:{number}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
