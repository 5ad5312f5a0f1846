"""The house keeps its shape: no import circle, leaf value types import no feature module,
and one module runs SQL (docs/architecture.md draws the layers)."""

from __future__ import annotations

import ast
import re

import pytest

from tests.house.graph import PACKAGE, ROOT, circles, graph, sources

# django_independent: reads the source files (ast), imports nothing of the app (CONTRIBUTING.md)
pytestmark = pytest.mark.django_independent

# Value types and checks every layer uses: they may import only each other and the settings.
LEAVES = {
    f"{PACKAGE}.{name}"
    for name in ("bounds", "durations", "exceptions", "jsontext", "rates", "arguments", "message")
}
FOUNDATION = LEAVES | {f"{PACKAGE}.conf"}


def test_the_package_has_no_import_circle():
    assert circles(graph()) == []


def test_the_circle_check_finds_a_circle():
    # The control: two modules importing each other are one circle.
    assert circles({"a": {"b": 1}, "b": {"a": 2}, "c": {"a": 3}}) == [["a", "b"]]


def test_leaf_value_types_import_no_feature_module():
    edges = graph()
    for leaf in sorted(LEAVES):
        assert leaf in edges, f"{leaf} is gone: update LEAVES"
        reaching_out = {target: line for target, line in edges[leaf].items() if target not in FOUNDATION}
        assert reaching_out == {}, f"{leaf} imports {reaching_out} (module: line)"


# Calls that run SQL, and SQL text, allowed only in the seam (and in the Spark writer, which
# runs on executors without Django and keeps its own connection code).
SEAM = {f"{PACKAGE}.db"}
OWN_CONNECTION = {f"{PACKAGE}.spark.writer", f"{PACKAGE}.spark.export"}
RUNS_SQL = {"execute", "executemany", "raw", "cursor", "copy"}
SQL_TEXT = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|LISTEN\s|NOTIFY\s)\b", re.I | re.S
)


def sql_calls(path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RUNS_SQL:
            found.append(f"{path.name}:{node.lineno} .{node.func.attr}(")
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SQL_TEXT.search(node.value)
            and not _is_docstring_like(node.value)
        ):
            found.append(f"{path.name}:{node.lineno} SQL text")
    return found


def _is_docstring_like(text: str) -> bool:
    return "``" in text or text.strip().endswith(".") and "\n\n" in text


def test_only_the_seam_runs_sql():
    offenders = {
        name: calls
        for name, path in sources().items()
        if name not in SEAM | OWN_CONNECTION and (calls := sql_calls(path))
    }
    assert offenders == {}


def test_the_seam_check_sees_a_cursor_and_sql_text(tmp_path):
    # The control: the check flags a cursor call and an inline statement.
    sample = tmp_path / "sample.py"
    sample.write_text('def f(c):\n    with c.cursor() as k:\n        k.execute("SELECT id FROM t")\n')
    assert len(sql_calls(sample)) == 3


def test_the_seam_exists_where_the_docs_say():
    assert (ROOT / "db.py").exists() and (ROOT / "sql" / "queries.sql").exists()


# Feature modules: the worker package runs handlers and keeps leases; features hook into it
# (worker/duties.py, the observers, signals), never the other way round.
FEATURES = {
    f"{PACKAGE}.{name}" for name in ("schedules", "tasks", "workflows", "topics", "api", "admin", "eager", "testing")
}


def test_the_worker_package_imports_no_feature_module():
    """Every import counted, function-level ones too: a feature module imported by the worker
    package (or by anything it imports, transitively) would tie the two together."""
    edges = graph()
    worker_modules = {name for name in edges if name == f"{PACKAGE}.worker" or name.startswith(f"{PACKAGE}.worker.")}
    assert worker_modules, "the worker package is gone: update the test"
    seen, reaching = set(worker_modules), {}
    frontier = sorted(worker_modules)
    while frontier:
        module = frontier.pop()
        for target in edges.get(module, {}):
            target_feature = f"{PACKAGE}.admin" if target.startswith(f"{PACKAGE}.admin.") else target
            if target_feature in FEATURES:
                reaching[module] = target
            if target not in seen and target.startswith(PACKAGE):
                seen.add(target)
                frontier.append(target)
    assert reaching == {}, f"the worker package reaches feature modules: {reaching} (importer: imported)"
