"""No import circle in the operator (``operator/pdscaler``) or the benchmark (``bench``).

The graph is read from the sources with ``ast`` (nothing is imported): one node per
module (a package is its ``__init__``), one edge per ``import`` or ``from ... import``
naming a module of the tree, wherever it is written: at the top, inside a function
(a deferred import is still a dependency) or under ``if TYPE_CHECKING:`` (an
annotation's type is still a dependency of the reader). ``from pkg import mod`` is an
edge to ``pkg.mod`` when ``mod`` is a module, else to ``pkg``. A circle is a strongly
connected component of two or more modules. Worked: before issue 28 there were three,
each between two files: ``pdscaler.reconcile`` <-> ``pdscaler.runtime`` (Runtime.tick
imported reconcile_once in the method), ``pdscaler.spec`` <-> ``pdscaler.types`` (Role,
under TYPE_CHECKING) and ``bench.native`` <-> ``bench.quality`` (native's replay check
runs quality's cases; quality labels its reports with native.engine_label).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: (base directory, top-level package) of every tree checked.
TREES = ((REPO / "operator", "pdscaler"), (REPO, "bench"))


def modules(trees: Iterable[tuple[Path, str]] = TREES) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` under the trees."""
    found: dict[str, Path] = {}
    for base, package in trees:
        for path in sorted((base / package).rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _owner(name: str, known: Mapping[str, Path]) -> str | None:
    """The longest known module ``name`` is in (``pdscaler.kube.Kube`` -> ``pdscaler.kube``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The known modules ``module`` (at ``path``) imports, itself left out."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in known else source)
    owners = {_owner(t, known) for t in targets}
    return {o for o in owners if o is not None and o != module}


def graph(known: Mapping[str, Path]) -> dict[str, set[str]]:
    return {m: imports_of(m, p, known) for m, p in known.items()}


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            step = next(todo, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(edges.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_the_walk_finds_a_circle_and_its_kinds_of_import(tmp_path: Path) -> None:
    """A made-up tree: a -> b at the top, b -> a inside a function, c -> a under
    TYPE_CHECKING and a -> c relatively: one circle of all three; d imports a only."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from p import b\nfrom . import c\n")
    (pkg / "b.py").write_text("def f():\n    from p.a import X\n")
    (pkg / "c.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    import p.a\n")
    (pkg / "d.py").write_text("import p.a.X\n")
    known = modules([(tmp_path, "p")])
    edges = graph(known)
    assert edges["p.d"] == {"p.a"}
    assert edges["p.a"] == {"p.b", "p.c"}
    assert circles(edges) == [["p.a", "p.b", "p.c"]]
    assert circles({"x": {"y"}, "y": set()}) == []


def test_the_operator_and_the_bench_import_no_circle() -> None:
    known = modules()
    assert len(known) > 100  # the trees were found
    found = circles(graph(known))
    assert found == [], found


#: The matrix benches' modules, top down (docs/design.md §6.2): each may import the ones
#: after it in its chain and none before it, directly or through others; the hour
#: bench's run and its report import neither each other.
BENCH_CHAINS = (
    ("bench.diurnal", "bench.diurnal_report", "bench.diurnal_verdicts", "bench.diurnal_plan"),
    ("bench.quality_run", "bench.quality_verdicts", "bench.quality"),
    ("bench.quality_report", "bench.quality_verdicts", "bench.quality"),
)


def reachable(edges: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_benches_import_their_report_and_verdicts_downwards_only() -> None:
    edges = graph(modules())
    for chain in BENCH_CHAINS:
        assert set(chain) <= set(edges)
        for i, module in enumerate(chain):
            upward = reachable(edges, module) & set(chain[:i])
            assert not upward, f"{module} imports {sorted(upward)}, above it"
    assert "bench.quality_report" not in reachable(edges, "bench.quality_run")
    assert "bench.quality_run" not in reachable(edges, "bench.quality_report")
