"""One direction of imports inside `lc_compaction` (docs/ARCHITECTURE.md, "Layers"): no module reaches, through
any chain of imports, back to itself. Every import statement counts (at the top, under `TYPE_CHECKING`, inside a
function): a reader follows all of them. An import inside a function is allowed only where it defers an optional
extra or a heavy plotting library, never a module of the package's core."""

from __future__ import annotations

import ast
from pathlib import Path

import lc_compaction

PACKAGE = Path(lc_compaction.__file__).parent

DEFERRED = {
    # module -> package modules it may import inside a function (optional extras and plotting, for start-up time)
    "lc_compaction.cli": {"lc_compaction._extras", "lc_compaction.report"},
    "lc_compaction.report": {"lc_compaction._extras"},
    "lc_compaction.integrations": {"lc_compaction.integrations.middleware", "lc_compaction.integrations.chat_history"},
    "lc_compaction.integrations.middleware": {"lc_compaction._extras"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, bool, int]]:
    """(imported package module, inside a function, line) for every import statement of the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            targets: list[str] = []
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([child.module] if child.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
            elif isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            for target in targets:
                if target in modules and target != name:
                    found.append((target, in_function, child.lineno))
            visit(child, inside)

    visit(tree, False)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {t for t, _, _ in _imports(name, path, modules)} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_the_package_has_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    """The check above can fail: a graph with a loop through three modules is reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_inside_a_function_but_the_deferred_extras():
    modules = _modules()
    inside = [(name, target, line) for name, path in modules.items()
              for target, in_function, line in _imports(name, path, modules)
              if in_function and target not in DEFERRED.get(name, set())]
    assert inside == []


def test_the_core_sits_below_the_front_doors():
    """The rules never import a front door, the CLI, the replay or the reports (they sit on top)."""
    graph = _graph()
    top = {m for m in graph if m.startswith(("lc_compaction.integrations", "lc_compaction.cli", "lc_compaction.replay",
                                               "lc_compaction.report"))}
    rules = ("ladder", "dedup", "offload", "progress", "policy", "compact", "facts", "markers", "structure",
             "strategies", "tokens")
    core = {m for m in graph if m.split(".")[1:2] and m.split(".")[1] in rules}
    assert {(m, t) for m in core for t in graph[m] if t in top} == set()
