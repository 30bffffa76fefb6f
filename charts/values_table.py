"""The values table of charts/pdscaler/README.md, generated from values.yaml.

Owns: reading values.yaml (the defaults with PyYAML; each key's description from the
comment lines just above it and its inline comment) and writing the Markdown table
between the README's ``<!-- values:start -->`` and ``<!-- values:end -->`` markers.
Must not: read anything but the chart's values.yaml and README.md. A mapping with
keys gets a row (its description) and one row per key below it; a value written on one
line (a list, ``{}``, a flow mapping) is one row. Example::

    python charts/values_table.py          # rewrite the README's table
    python charts/values_table.py --check  # exit 1 if the README's table is stale

gives rows like ``| `metrics.port` | int | `8080` | /metrics and the /healthz ... |``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "pdscaler"
START, END = "<!-- values:start -->", "<!-- values:end -->"
KEY = re.compile(r"^(\s*)([A-Za-z0-9_]+):(.*)$")


def _inline_comment(rest: str) -> str:
    """The ``# ...`` after a value (outside quotes)."""
    quote = ""
    for i, ch in enumerate(rest):
        if ch in "\"'" and not quote:
            quote = ch
        elif ch == quote:
            quote = ""
        elif ch == "#" and not quote and (i == 0 or rest[i - 1] in " \t"):
            return rest[i + 1 :].strip()
    return ""


def comments(text: str) -> dict[str, str]:
    """Dotted key -> its description (comment block above + inline comment)."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            block = []
            continue
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        m = KEY.match(line)
        if not m:
            block = []
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        dotted = ".".join(k for _, k in stack)
        parts = [" ".join(block), _inline_comment(rest)]
        out[dotted] = " ".join(p for p in parts if p)
        block = []
    return out


def _type(value: Any) -> str:
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "string")):
        if isinstance(value, kind):
            return name
    return "list" if isinstance(value, list) else "object"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rows(values: dict[str, Any], described: dict[str, str], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        description = _cell(described.get(dotted, ""))
        if isinstance(value, dict) and value and not _one_line(dotted, described):
            if description:
                out.append(f"| `{dotted}` | object | | {description} |")
            out += rows(value, described, f"{dotted}.")
            continue
        default = _cell(json.dumps(value, separators=(", ", ": ")))
        out.append(f"| `{dotted}` | {_type(value)} | `{default}` | {description} |")
    return out


def _one_line(dotted: str, described: dict[str, str]) -> bool:
    """True for a mapping written in flow style on its key's line."""
    return dotted in _FLOW


_FLOW: set[str] = set()


def table(chart: Path = CHART) -> str:
    text = (chart / "values.yaml").read_text()
    _FLOW.clear()
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = KEY.match(line)
        if not m or line.lstrip().startswith("#"):
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        if m.group(3).strip().startswith("{") and m.group(3).strip() != "{}":
            _FLOW.add(".".join(k for _, k in stack))
    values: dict[str, Any] = yaml.safe_load(text)
    head = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    return "\n".join(head + rows(values, comments(text))) + "\n"


def render(readme: str, chart: Path = CHART) -> str:
    """``readme`` with its table replaced by the one of ``chart``'s values.yaml."""
    before, _, rest = readme.partition(START)
    _, _, after = rest.partition(END)
    return f"{before}{START}\n{table(chart)}{END}{after}"


def main(argv: list[str]) -> int:
    readme = CHART / "README.md"
    current = readme.read_text()
    wanted = render(current)
    if "--check" in argv:
        if current != wanted:
            print("charts/pdscaler/README.md: values table is stale; run "
                  "python charts/values_table.py", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    readme.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
