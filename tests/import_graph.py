"""The project's import graph, read from the source with `ast` (nothing is imported).

Every import statement of a module counts, wherever it stands (a function-level import runs
too, only later), relative ones resolved against the module's package, and so does
`importlib.import_module("name")` with the name written out. An import names the
most specific project module it reaches: `from a.b import c` is an edge to `a.b.c` when that
is a module, else to `a.b`. Parent packages (whose `__init__` also runs) are not edges: every
module would then depend on its package's `__init__`, which imports its children.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    lines: int
    imports: tuple[Import, ...]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def read_modules(root: Path, packages: Iterable[str],
                 known: Iterable[str] = ()) -> dict[str, Module]:
    """Every module under `root/<package>` for each of `packages`, with its imports of the
    project: modules of `packages` and anything under the top-level names in `known` (folders
    that are not parsed but must not be imported, such as tests)."""
    paths = {module_name(root, p): p for package in packages
             for p in sorted((root / package).rglob("*.py"))}
    tops = {name.split(".")[0] for name in paths} | set(known)
    modules = {}
    for name, path in paths.items():
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        is_package = path.name == "__init__.py"
        imports = tuple(_project_imports(tree, name, is_package, paths, tops))
        modules[name] = Module(name, path, len(text.splitlines()), imports)
    return modules


def _project_imports(tree: ast.AST, name: str, is_package: bool, modules: dict[str, Path],
                     tops: set[str]) -> Iterable[Import]:
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            targets = [_most_specific(f"{base}.{alias.name}", base, modules)
                       for alias in node.names]
        elif _is_import_module(node):
            targets = [node.args[0].value]
        else:
            continue
        for target in dict.fromkeys(targets):
            if target.split(".")[0] in tops and target != name:
                yield Import(name, target, node.lineno)


def _is_import_module(node: ast.AST) -> bool:
    """`importlib.import_module("a.b")` or `import_module("a.b")`: a name written out."""
    if not isinstance(node, ast.Call) or not node.args or len(node.args) > 1:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    return (name == "import_module" and isinstance(first, ast.Constant)
            and isinstance(first.value, str) and not first.value.startswith("."))


def _absolute(module: str | None, level: int, package: str) -> str:
    if not level:
        return module or ""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _most_specific(candidate: str, base: str, modules: dict[str, Path]) -> str:
    return candidate if candidate in modules else base


def edges(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (those that were parsed)."""
    return {name: {i.target for i in m.imports if i.target in modules}
            for name, m in modules.items()}


@dataclass(frozen=True)
class Cycle:
    """Modules that import each other, directly or not, and one shortest way round them."""

    modules: frozenset[str]
    example: tuple[str, ...]  # in import order, the first repeated at the end

    def __str__(self) -> str:
        return " -> ".join(self.example)


def cycles(graph: dict[str, set[str]]) -> list[Cycle]:
    """Every group of modules that import each other (a strongly connected group of more than
    one), with a shortest cycle through its first module; sorted, so a report is stable."""
    found = [Cycle(frozenset(group), tuple(_shortest_cycle(min(group), graph, group)))
             for group in _strongly_connected(graph) if len(group) > 1]
    return sorted(found, key=lambda c: c.example)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative (the graph may be deeper than the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                groups.append(group)
    return groups


def _shortest_cycle(start: str, graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """Breadth-first from `start` back to itself, inside its group."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & group):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a group of modules but on no cycle")
