"""The package's modules and their imports, read from the source (every import counts: at the
top, inside functions and under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "django_lonnymq"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, Path]:
    """Every module of the package by dotted name (migrations left out: they are history)."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        if "migrations" in path.relative_to(ROOT).parts:
            continue
        found[module_name(path)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> dict[str, int]:
    """The package modules ``name`` imports, each with the line of its first import."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str, line: int) -> None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE):
                    add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            elif node.module and node.module.startswith(PACKAGE):
                base = node.module
            else:
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in known else base, node.lineno)
    return found


def graph() -> dict[str, dict[str, int]]:
    modules = sources()
    known = set(modules)
    return {name: imports(name, path, known) for name, path in modules.items()}


def circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), or one importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found
