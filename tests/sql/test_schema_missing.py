"""Forgetting ``migrate``: enqueue, the worker and ``manage.py check`` say so and say what to
run, instead of "function lonnymq_..._v1 does not exist"."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import psycopg
import pytest
from django.db import ProgrammingError, connection, transaction
from psycopg import conninfo
from psycopg import sql as pgsql

from django_lonnymq import api, sql
from django_lonnymq.exceptions import SchemaMissing, sql_errors
from tests import conftest
from tests.conftest import ROOT, worker_env

HINT = "run `python manage.py migrate`"


class Undo(Exception):
    """Raised to roll back the DDL a test made inside its transaction."""


@pytest.mark.django_db
def test_enqueue_into_a_missing_table() -> None:
    with pytest.raises(SchemaMissing) as info, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE lonnymq_channel RENAME TO lonnymq_channel_elsewhere")
        api.enqueue("t_schema", {"n": 1})
    assert HINT in str(info.value) and "lonnymq_channel" in str(info.value)
    assert isinstance(info.value.__cause__, Exception)  # the database's own error, chained
    assert api.enqueue("t_schema", {"n": 1}) > 0  # rolled back: the table is there again


@pytest.mark.django_db
def test_enqueue_with_a_missing_function() -> None:
    with pytest.raises(SchemaMissing) as info, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                "DO $$ BEGIN EXECUTE pg_catalog.format('ALTER FUNCTION %s RENAME TO lonnymq_gone',"
                " 'lonnymq_enqueue_v4'::regproc::regprocedure); END $$"
            )
        api.enqueue("t_schema", {"n": 1})
    assert HINT in str(info.value) and "lonnymq_enqueue_v4" in str(info.value)


@pytest.mark.django_db
def test_other_undefined_objects_are_not_ours() -> None:
    with (
        pytest.raises(ProgrammingError) as info,
        transaction.atomic(),
        sql_errors(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT someone_elses_function()")
    assert isinstance(info.value.__cause__, psycopg.errors.UndefinedFunction)


@pytest.fixture
def empty_database(django_db_setup: None, django_db_blocker: pytest.FixtureRequest) -> Iterator[str]:
    """A database beside the test database where nothing was migrated; its URL."""
    with django_db_blocker.unblock():
        base, url = conftest.test_dsn(), conftest.test_database_url()
    name = f"{conninfo.conninfo_to_dict(base)['dbname']}_unmigrated"
    admin = conninfo.make_conninfo(base, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {}").format(pgsql.Identifier(name)))
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name)))


def _manage(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        env=worker_env(DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_worker_refuses_to_start_on_an_unmigrated_database(empty_database: str) -> None:
    done = _manage(empty_database, "run_queue_worker", "--queue", "t_record", "--burst")
    assert done.returncode == 1, done.stdout + done.stderr
    assert HINT in done.stderr and "0001_initial" in done.stderr, done.stderr
    assert "does not exist" not in done.stderr


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_check_warns_and_migrate_still_runs(empty_database: str) -> None:
    checked = _manage(empty_database, "check", "--database", "default")
    assert checked.returncode == 0, checked.stderr
    assert "lonnymq.W210" in checked.stderr and HINT in checked.stderr, checked.stderr
    migrated = _manage(empty_database, "migrate", "django_lonnymq", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr  # the warning does not stop migrate
    again = _manage(empty_database, "check", "--database", "default")
    assert again.returncode == 0 and "lonnymq.W210" not in again.stderr, again.stderr
    with psycopg.connect(empty_database) as conn:
        assert conn.execute(sql.query("pending"), {"queues": ["t_record"]}).fetchone() == (False,)
