"""Shared fixtures: raw connections to the test database, worker subprocesses, recording tables."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent

RECORDING_TABLES = """
CREATE TABLE IF NOT EXISTS testapp_delivery (
    id bigserial PRIMARY KEY, message_id bigint, queue text, channel text, attempt int,
    event text, pid int, payload jsonb, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS testapp_inflight (channel text PRIMARY KEY, now int DEFAULT 0, peak int DEFAULT 0);
TRUNCATE testapp_delivery, testapp_inflight;
"""


def test_dsn() -> str:
    """libpq connection string of the test database (valid once the test DB exists)."""
    s = connection.settings_dict
    parts = {
        "dbname": s["NAME"],
        "user": s["USER"],
        "password": s["PASSWORD"],
        "host": s["HOST"],
        "port": s["PORT"],
    }
    return " ".join(f"{k}={v}" for k, v in parts.items() if v)


def test_database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


# Tables no Django model owns: a TransactionTestCase-style flush leaves their rows behind.
UNOWNED_TABLES = (
    "lonnymq_wake",
    "lonnymq_release_count",
    "lonnymq_trace",
    "lonnymq_queue_released",
    "lonnymq_eligible_mark",
    "lonnymq_ready_mark",
)


def _empty_unowned_tables() -> None:
    with connection.cursor() as cursor:
        for table in UNOWNED_TABLES:
            cursor.execute(f"DELETE FROM {table}")


@pytest.fixture(autouse=True)
def _unowned_tables_empty(request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[None]:
    """Tests that commit (transaction=True) find no wake-up mark left by another test (or by an
    interrupted run, with --reuse-db), and leave none."""
    marker = request.node.get_closest_marker("django_db")
    committing = "transactional_db" in request.fixturenames or bool(
        marker and marker.kwargs.get("transaction")
    )
    if committing:
        request.getfixturevalue("transactional_db")
        with django_db_blocker.unblock():
            _empty_unowned_tables()
    yield
    if committing:
        with django_db_blocker.unblock():
            _empty_unowned_tables()


# How a test that commits (transaction=True) is cleaned up after. Django's TransactionTestCase
# flushes each database: it truncates every model table, then sends post_migrate, which has
# contenttypes and auth write their rows again, query after query (about 0.3 s a test, 100 s of
# the fast set). Instead, one TRUNCATE empties every table of the database that was written to
# since it was last emptied (its file is not empty: the model tables and the ones no model
# owns, such as the wake-up marks and the recording tables; a table nobody wrote to is left
# alone, truncating it costs as much as truncating a full one), then the rows post_migrate
# wrote into the empty tables the first time are put back as they were if a test changed them.
# A test sees what Django's flush would leave, with the same ids every time. Tests that ask for
# available_apps or serialized_rollback get Django's own flush.
_AFTER_FLUSH: dict[str, dict[str, str]] = {}  # alias -> {table: its rows as JSON}


def _rows(cursor: Any, table: str) -> str | None:
    cursor.execute(f"SELECT json_agg(t)::text FROM {table} t")
    return cursor.fetchone()[0]


def _empty_all_tables(alias: str) -> None:
    from django.core.management.sql import emit_post_migrate_signal
    from django.db import connections, transaction

    after_flush = _AFTER_FLUSH.get(alias)
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT pg_catalog.quote_ident(relname) FROM pg_catalog.pg_class"
            " WHERE relkind = 'r' AND relnamespace = pg_catalog.current_schema()::regnamespace"
            " AND relname <> 'django_migrations' AND pg_catalog.pg_relation_size(oid) > 0 ORDER BY relname"
        )
        written = [row[0] for row in cursor.fetchall() if after_flush is None or row[0] not in after_flush]
        if written:  # CASCADE: a table referencing one of these may be empty, hence not listed
            cursor.execute(f"TRUNCATE {', '.join(written)} CASCADE")
        if after_flush is not None:
            if any(_rows(cursor, table) != rows for table, rows in after_flush.items()):
                cursor.execute(f"TRUNCATE {', '.join(after_flush)} CASCADE")
                for table, rows in after_flush.items():  # the foreign keys are deferred
                    cursor.execute(
                        f"INSERT INTO {table} SELECT * FROM json_populate_recordset(NULL::{table}, %s::json)",
                        [rows],
                    )
            return
    emit_post_migrate_signal(0, False, alias)  # the first time: as Django's flush does, once
    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT pg_catalog.quote_ident(relname) FROM pg_catalog.pg_class"
            " WHERE relkind = 'r' AND relnamespace = pg_catalog.current_schema()::regnamespace"
            " AND relname <> 'django_migrations' ORDER BY relname"
        )
        found = {table: rows for (table,) in cursor.fetchall() if (rows := _rows(cursor, table)) is not None}
    _AFTER_FLUSH[alias] = found


@pytest.fixture(scope="session", autouse=True)
def _truncate_instead_of_flush() -> Iterator[None]:
    from django.contrib.contenttypes.models import ContentType
    from django.test import TransactionTestCase

    flush = TransactionTestCase._fixture_teardown

    def teardown(self: TransactionTestCase) -> None:
        if self.available_apps is not None or self.serialized_rollback:
            flush(self)
            return
        for alias in self._databases_names(include_mirrors=False):
            _empty_all_tables(alias)
        ContentType.objects.clear_cache()  # a content type a test created is gone

    TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]
    yield
    TransactionTestCase._fixture_teardown = flush  # type: ignore[method-assign]


@pytest.fixture(params=["client-binding", "prepared"])
def statement_binding(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test twice: with Django's defaults (client-side binding, nothing prepared) and
    with prepared statements on, as ``OPTIONS["prepare_threshold"]`` turns them on, which
    sends the API's statements through the server-binding path."""
    if request.param == "client-binding":
        yield request.param
        return
    connection.ensure_connection()
    raw = connection.connection
    before = raw.prepare_threshold
    raw.prepare_threshold = 0
    try:
        yield request.param
    finally:
        raw.prepare_threshold = before


@pytest.fixture
def dsn(transactional_db: None) -> str:
    return test_dsn()


@pytest.fixture
def connect(dsn: str) -> Iterator[Callable[..., psycopg.Connection]]:
    """Open extra real connections to the test database (closed after the test)."""
    opened: list[psycopg.Connection] = []

    def factory(autocommit: bool = True) -> psycopg.Connection:
        conn = psycopg.connect(dsn, autocommit=autocommit)
        opened.append(conn)
        return conn

    yield factory
    for conn in opened:
        conn.close()


@pytest.fixture
def recording(transactional_db: None) -> None:
    """Tables the test handlers (tests/testapp/handlers.py) write their deliveries to."""
    with connection.cursor() as cursor:
        cursor.execute(RECORDING_TABLES)


# In what ``run_queue_worker`` prints once it has installed its SIGTERM handler (its start
# line, "lonnymq worker NAME: queues=..."): a worker stopped before it would die of the
# signal's default action instead of shutting down. The worker's own "serving" log line is
# not printed under the command.
WORKER_STARTED = ": queues="


def worker_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=test_database_url(),
        DJANGO_SETTINGS_MODULE="tests.worker_settings",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@pytest.fixture
def start_worker(transactional_db: None) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start ``manage.py run_queue_worker`` as a real subprocess on the test database."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "run_queue_worker", *args],
            cwd=ROOT,
            env=env or worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


# Besides the tests marked slow by hand (the soaks, the chaos test, the migration walk, and any
# other test over 3 s on a 2-core machine, so that make test-fast stays within 2 minutes), whole
# kinds of test that cost seconds each are slow, found by what they start, so that a new one
# stays out of `make test-fast` (-m "not slow") without being marked. `make test` runs them all.
SLOW_FIXTURES = ("start_worker", "spark")  # run_queue_worker processes; Spark jobs in a JVM


# Under pytest-xdist (-n) every process has a test database of its own (pytest-django names it
# test_<name>_gw0, _gw1, ...) but they share the server: a test marked alone acts on the whole
# server (a restart, its shared lock table) and would break the others' tests, so it fails there
# and runs in a pytest of its own, as the Makefile's targets do after the parallel run.
ALONE = (
    "this test acts on the whole server (marked alone): run it without -n, in a pytest of its own "
    "(make test does, after the parallel run: CONTRIBUTING.md)"
)


@pytest.fixture(autouse=True)
def _alone_outside_xdist(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("alone") and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(ALONE, pytrace=False)


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test's captured output and failure text can hold a lone surrogate (the stored-size
    tests log one on purpose); pytest-xdist sends a report as UTF-8 and would crash its process
    on one, so it is escaped as backslashes, as the stored text escapes it."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    report.sections = [(title, _utf8(text)) for title, text in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _utf8(text) != text:
            report.longrepr = _utf8(text)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (
            any(name in SLOW_FIXTURES for name in getattr(item, "fixturenames", ()))
            or item.path.name.endswith("_browser.py")  # a headless Chromium
            or item.path.parent.name == "packaging"  # builds the wheel into a fresh venv, the docs site
            # A pytest and a test database of their own after the parallel run (about 30 s for
            # the lock table's tests): make test-fast runs no such second pytest.
            or item.get_closest_marker("alone")
        ):
            item.add_marker(pytest.mark.slow)
        if "spark" in getattr(item, "fixturenames", ()):
            # One JVM for the Spark tests (the session-scoped SparkSession takes about a minute
            # to start): under pytest-xdist with --dist loadgroup, one process runs them all.
            item.add_marker(pytest.mark.xdist_group("spark"))
