"""The house keeps its shape: every layer rule docs/architecture.md states, checked on the
import graph (every import counts: at the top, inside functions, under ``TYPE_CHECKING``).

- no import circle;
- each room (a module, or a subpackage as a whole) sits on one floor of :data:`FLOORS`, and
  imports only rooms of its own floor or of floors below;
- leaf value types import only each other and the settings;
- one module runs SQL (and the Spark writer, its own connection);
- the worker package reaches no feature module and imports none of its observers (spans,
  metrics): they attach from outside;
- the Spark producer imports no Django and, of the package, only what it names;
- a management command imports no other command (shared helpers: management/options.py);
- an admin page imports the admin's common parts, never another page (channels routes the
  dashboard);
- no module over 700 lines.
"""

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
    f"{PACKAGE}.{name}"
    for name in ("schedules", "tasks", "workflows", "topics", "api", "admin", "eager", "testing")
}


def test_the_worker_package_imports_no_feature_module():
    """Every import counted, function-level ones too: a feature module imported by the worker
    package (or by anything it imports, transitively) would tie the two together."""
    edges = graph()
    worker_modules = {
        name for name in edges if name == f"{PACKAGE}.worker" or name.startswith(f"{PACKAGE}.worker.")
    }
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


# The floors of docs/architecture.md ("The layers"), top to bottom. A room is a top-level module
# or a subpackage as a whole (admin, management, models, worker, prometheus, tracing, spark,
# sql, tasks): it imports rooms of its own floor or below, never above.
FLOORS: list[tuple[str, set[str]]] = [
    (
        "entry points",
        {"__init__", "admin", "management", "pytest_plugin", "apps", "checks", "testing", "prometheus"},
    ),
    ("features", {"api", "limits", "ordering", "workflows", "schedules", "topics", "tasks"}),
    ("lifecycle", {"eager", "worker", "tracing", "durable", "progress"}),
    ("read side", {"alarms", "figures"}),
    ("tables and routing", {"models", "workers", "registry", "routing"}),
    ("the seam", {"db", "sql", "spark", "statements"}),
    (
        "foundation",
        {"bounds", "durations", "exceptions", "jsontext", "rates", "arguments", "message", "conf"}
        | {"signals", "installed", "urlparams", "logs", "sampling"},
    ),
]
SUBPACKAGES = {
    "admin",
    "management",
    "models",
    "worker",
    "prometheus",
    "tracing",
    "spark",
    "sql",
    "tasks",
    "statements",
}


def room_of(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def floor_of(room: str) -> int:
    for number, (_, rooms) in enumerate(FLOORS):
        if room in rooms:
            return number
    raise AssertionError(f"room {room!r} is on no floor: give it one in FLOORS and in docs/architecture.md")


def test_every_room_is_on_one_floor():
    rooms = {room_of(name) for name in graph()}
    placed = [room for _, members in FLOORS for room in members]
    assert len(placed) == len(set(placed)), "a room is on two floors"
    assert sorted(rooms - set(placed)) == [], "rooms on no floor: give each one in FLOORS and the docs"
    assert sorted(set(placed) - rooms) == [], "FLOORS names rooms that are gone"


def upward(edges: dict[str, dict[str, int]]) -> dict[str, str]:
    found = {}
    for module, targets in edges.items():
        for target, line in targets.items():
            if floor_of(room_of(target)) < floor_of(room_of(module)):
                found[f"{module}:{line}"] = f"{target} ({FLOORS[floor_of(room_of(target))][0]})"
    return found


def test_no_room_imports_a_floor_above_its_own():
    assert upward(graph()) == {}, "imports that run up a floor (importer:line -> imported)"


def test_the_floor_check_sees_an_import_running_up():
    # The control: the seam importing a feature runs up three floors.
    assert upward({f"{PACKAGE}.db": {f"{PACKAGE}.api": 7}}) == {
        f"{PACKAGE}.db:7": f"{PACKAGE}.api (features)"
    }


def test_the_worker_package_imports_none_of_its_observers():
    """The spans and the metrics observe the worker: they attach from outside (the app's
    ``ready()`` registers the spans, ``run_queue_worker --metrics-port`` the metrics)."""
    edges = graph()
    reaching = {
        f"{module}:{line}": target
        for module, targets in edges.items()
        if room_of(module) == "worker"
        for target, line in targets.items()
        if room_of(target) in {"tracing", "prometheus"}
    }
    assert reaching == {}


# What the Spark producer may import of the package: it runs on executors without Django.
SPARK_MAY_IMPORT = {f"{PACKAGE}.{name}" for name in ("bounds", "exceptions", "jsontext", "sql")}


def test_spark_imports_no_django_and_only_what_it_names():
    edges = graph()
    for name, path in sources().items():
        if room_of(name) != "spark":
            continue
        outside = {t for t in edges[name] if room_of(t) != "spark" and t not in SPARK_MAY_IMPORT}
        assert outside == set(), f"{name} imports {outside}"
        tree = ast.parse(path.read_text())
        django = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            and any(a.name.split(".")[0] == "django" for a in node.names)
            or isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] == "django"
            and not node.level
        ]
        assert django == [], f"{name} imports Django at lines {django}"


def test_no_command_imports_another():
    edges = graph()
    commands = f"{PACKAGE}.management.commands."
    crossing = {
        f"{module}:{line}": target
        for module, targets in edges.items()
        if module.startswith(commands)
        for target, line in targets.items()
        if target.startswith(commands)
    }
    assert crossing == {}, "shared helpers go in management/options.py"


# An admin page may import these parts of the admin; channels also routes the dashboard.
ADMIN_SHARED = {f"{PACKAGE}.admin.common", f"{PACKAGE}.admin.charts"}
ADMIN_ALLOWED = {(f"{PACKAGE}.admin.channels", f"{PACKAGE}.admin.dashboard")}


def test_admin_pages_import_common_parts_never_each_other():
    edges = graph()
    crossing = {
        f"{module}:{line}": target
        for module, targets in edges.items()
        if module.startswith(f"{PACKAGE}.admin.")
        for target, line in targets.items()
        if target.startswith(f"{PACKAGE}.admin.")
        and target not in ADMIN_SHARED
        and (module, target) not in ADMIN_ALLOWED
    }
    assert crossing == {}


# No module over this many lines (SQL and migrations aside: sources() leaves migrations out).
MAX_LINES = 700


def test_no_module_over_700_lines():
    long = {
        name: n for name, path in sources().items() if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these into modules of one job each: {long}"


# Eager mode is a switch of the lifecycle's executor, read by eager itself and by the testing
# helpers that drive it: producers call its hooks (after_enqueue, made_due, after_workflow),
# which do nothing with a worker.
MAY_ASK_IF_EAGER = {f"{PACKAGE}.eager", f"{PACKAGE}.testing"}
STATEMENT_CALLS = {"run", "value", "rows", "run_value", "models", "quietly"}


def _statements_named(tree: ast.AST) -> list[tuple[int, str]]:
    """The statement names a module passes to a runner (``x.value("ack", ...)``)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in STATEMENT_CALLS
        ):
            for arg in node.args[:2]:  # (name, params) or (conn, name, params)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, arg.value))
    return found


def test_only_eager_mode_asks_whether_it_is_on():
    asking = {
        f"{name}:{node.lineno}"
        for name, path in sources().items()
        if name not in MAY_ASK_IF_EAGER
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "enabled"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id.lstrip("_") == "eager"
    }
    assert asking == set(), "producers call eager's hooks, which check the switch themselves"


def _statement_names() -> set[str]:
    names = set()
    for path in (ROOT / "sql").glob("*.sql"):
        names |= set(re.findall(r"^-- name: (\w+)$", path.read_text(), flags=re.M))
    return names


def test_every_named_statement_has_exactly_one_function():
    """The statement layer (statements/): one function per named statement, registered under
    its name, each defined once."""
    from django_lonnymq import statements

    defined = {}
    for path in sorted((ROOT / "statements").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for decorator in node.decorator_list:
                    if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "statement":
                        name = decorator.args[0].value
                        assert name not in defined, f"{name} has two functions: {defined[name]}, {path.name}"
                        defined[name] = f"{path.name}:{node.name}"
    assert sorted(defined) == sorted(_statement_names())
    assert sorted(statements.FUNCTIONS) == sorted(defined)


# The Spark writer runs on executors without Django: it names its one statement itself.
NAMES_STATEMENTS = {f"{PACKAGE}.db", f"{PACKAGE}.spark.writer"}


def test_nothing_outside_the_statement_layer_names_a_statement():
    statement_names = _statement_names()
    naming = {
        f"{name}:{line}": value
        for name, path in sources().items()
        if room_of(name) not in {"statements", "sql"} and name not in NAMES_STATEMENTS
        for line, value in _statements_named(ast.parse(path.read_text()))
        if value in statement_names
    }
    assert naming == {}, "call statements.<name>(...) instead (django_lonnymq/statements/)"


def test_the_naming_check_sees_a_statement_passed_by_name():
    # The control.
    tree = ast.parse('db.value("ack", {"ids": "{1}"}, using=None)')
    assert _statements_named(tree) == [(1, "ack")]


# The lifecycle executors forward a statement function's (name, params) to db.py on their own
# connection (the worker's control connection, a Django alias): they name no statement.
FORWARDS_TO_DB = {f"{PACKAGE}.worker.connection", f"{PACKAGE}.worker.lifecycle"}
DB_RUNNERS = {"rows", "value", "run", "run_value", "models"}


def _db_runner_calls(tree: ast.AST) -> list[int]:
    """The lines calling ``db.rows/value/run/run_value/models`` (``db`` or ``_db``)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in DB_RUNNERS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id.lstrip("_") == "db"
    ]


def test_only_the_statement_layer_calls_the_db_runners():
    calling = {
        name: lines
        for name, path in sources().items()
        if room_of(name) not in {"statements", "sql", "db"} and name not in FORWARDS_TO_DB
        if (lines := _db_runner_calls(ast.parse(path.read_text())))
    }
    assert calling == {}, "call statements.<name>(...) instead (django_lonnymq/statements/)"


def test_the_runner_check_sees_a_db_call():
    # The control: the check flags a direct db.value call.
    assert _db_runner_calls(ast.parse('db.value("ack", {}, using=None)')) == [1]
