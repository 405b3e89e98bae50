"""The house rules of docs/ARCHITECTURE.md, checked on the source: modules under 500 lines,
functions under 60, and no modules that import each other in a loop.

Each failure lists every offender with its size, so that a merge that pushes several over can fix
them all at once.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Set
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = (REPO / "daemon", REPO / "client", REPO / "bench")
# Tests hold scenarios whose steps read best in one function: only their modules' size is checked.
TESTS = (REPO / "tests",)
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _modules(bases: tuple[Path, ...] = SOURCES) -> Iterator[tuple[Path, str]]:
    for base in bases:
        for path in sorted(base.rglob("*.py")):
            yield path.relative_to(REPO), path.read_text(encoding="utf-8")


def test_no_module_is_over_500_lines() -> None:
    over = sorted(
        (len(text.splitlines()), str(path))
        for path, text in _modules(SOURCES + TESTS)
        if len(text.splitlines()) > MAX_MODULE_LINES
    )
    assert not over, "modules over 500 lines (split them by idea):\n" + "\n".join(
        f"  {path}: {lines} lines" for lines, path in reversed(over)
    )


def test_no_function_is_over_60_lines() -> None:
    over = []
    for path, text in _modules():
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    over.append((lines, f"{path}:{node.lineno} {node.name}"))
    over.sort(reverse=True)
    assert not over, "functions over 60 lines (make their stages named helpers):\n" + "\n".join(
        f"  {where}: {lines} lines" for lines, where in over
    )


def loops(imports: Mapping[str, Set[str]]) -> list[list[str]]:
    """The groups of modules that import each other in a loop (strongly connected components of
    more than one module; Tarjan's algorithm, iterative: the graph has hundreds of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(imports.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def test_loops_finds_each_loop_and_only_loops() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}, "f": {"g"}}
    graph |= {"g": {"f"}, "h": {"a"}}
    assert loops(graph) == [["a", "b", "c"], ["f", "g"]]
    assert loops({"x": {"y"}, "y": set()}) == []


def test_no_modules_import_each_other_in_a_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Type-only imports count: they are a loop a reader has to follow all the same.
    monkeypatch.syspath_prepend(str(REPO))  # bench/, as lint-imports finds it
    graph = grimp.build_graph("recalld", "recalld_client", "bench", cache_dir=None)
    imports = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert len(imports) > 200  # the whole package was found
    found = loops(imports)
    assert not found, "modules that import each other in a loop:\n" + "\n".join(
        "  " + " <-> ".join(group) for group in found
    )
