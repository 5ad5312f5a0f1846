"""The migration installs and removes everything: up, down to zero, up, down, up.

The models and the hand-written SQL agree (``makemigrations --check`` is clean).
"""

from __future__ import annotations

import re
from importlib import resources

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from django_lonnymq import sql

CORE_TABLES = {"lonnymq_channel", "lonnymq_message", "lonnymq_dedup", "lonnymq_dead_message"}
CREATE_FUNCTION = re.compile(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\(", re.IGNORECASE)
NEW_FUNCTION = re.compile(r"CREATE FUNCTION (\w+)\(", re.IGNORECASE)
REPLACED_FUNCTION = re.compile(r"CREATE OR REPLACE FUNCTION (\w+)\(", re.IGNORECASE)
CREATE_TABLE = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", re.IGNORECASE)
DROP_FUNCTION = re.compile(r"DROP FUNCTION (?:IF EXISTS )?(\w+)\(", re.IGNORECASE)
DROP_TABLE = re.compile(r"DROP TABLE (?:IF EXISTS )?(\w+)", re.IGNORECASE)


def migration_files() -> list[str]:
    """The up files of every migration, in order (0001_initial.up.sql, ...)."""
    names = [p.name for p in resources.files(sql.__name__).iterdir()]
    return sorted(n for n in names if re.fullmatch(r"\d{4}_\w+\.up\.sql", n))


def expected_objects() -> tuple[set[str], set[str]]:
    """Tables and functions the migrations leave when all are applied."""
    tables: set[str] = set()
    functions: set[str] = set()
    for name in migration_files():
        text = sql.read(name)
        tables = (tables - set(DROP_TABLE.findall(text))) | set(CREATE_TABLE.findall(text))
        functions = (functions - set(DROP_FUNCTION.findall(text))) | set(CREATE_FUNCTION.findall(text))
    return tables, functions


def installed() -> dict[str, set[str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_name LIKE 'lonnymq%%'"
        )
        tables = {row[0] for row in cursor.fetchall()}
        cursor.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = current_schema() AND p.proname LIKE 'lonnymq%%'"
        )
        functions = {row[0] for row in cursor.fetchall()}
        cursor.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = current_schema() AND c.relname LIKE 'lonnymq%%' AND c.relkind IN ('S', 'i')"
        )
        relations = {row[0] for row in cursor.fetchall()}
    return {"tables": tables, "functions": functions, "relations": relations}


def applied() -> set[str]:
    return set(
        MigrationRecorder.Migration.objects.filter(app="django_lonnymq").values_list("name", flat=True)
    )


def assert_installed() -> None:
    state = installed()
    tables, functions = expected_objects()
    assert tables >= CORE_TABLES and len(functions) >= 20  # the regexes found them
    assert state["tables"] == tables
    assert state["functions"] == functions
    assert {
        "lonnymq_turn_seq",
        "lonnymq_channel_eligible_idx",
        "lonnymq_message_ready_idx",
        "lonnymq_message_lease_idx",
    } <= state["relations"]
    assert "0001_initial" in applied()


def assert_removed() -> None:
    assert installed() == {"tables": set(), "functions": set(), "relations": set()}
    assert applied() == set()


@pytest.mark.django_db(transaction=True)
def test_migrate_up_down_up_down_up():
    assert_installed()
    try:
        call_command("migrate", "django_lonnymq", "zero", verbosity=0)
        assert_removed()
        call_command("migrate", "django_lonnymq", verbosity=0)
        assert_installed()
        call_command("migrate", "django_lonnymq", "zero", verbosity=0)
        assert_removed()
    finally:
        # Whatever happened, later tests need the schema back.
        call_command("migrate", verbosity=0)
    assert_installed()
    # And the reinstalled functions work end to end.
    from django_lonnymq import api, enqueue

    message_id = enqueue("mig", {"ok": True})
    with connection.cursor() as cursor:
        cursor.execute(
            sql.query("dequeue"),
            {"queue": "mig", "batch_size": 1, "lease_ms": 1000, "worker": None, "tolerance_ms": 50},
        )
        assert cursor.fetchone()[0] == message_id
    assert api.check() == []


@pytest.mark.parametrize("up", migration_files())
def test_each_down_sql_drops_what_its_up_sql_creates(up):
    up_text = sql.read(up)
    down_text = sql.read(up.replace(".up.sql", ".down.sql"))
    assert set(DROP_FUNCTION.findall(down_text)) >= set(NEW_FUNCTION.findall(up_text))
    # A function an earlier migration created and this one replaces is restored, not dropped.
    replaced = set(REPLACED_FUNCTION.findall(up_text))
    assert set(REPLACED_FUNCTION.findall(down_text)) >= replaced
    assert not replaced & set(DROP_FUNCTION.findall(down_text))
    assert set(DROP_TABLE.findall(down_text)) >= set(CREATE_TABLE.findall(up_text))


@pytest.mark.django_db
def test_makemigrations_check_is_clean():
    try:
        call_command("makemigrations", "django_lonnymq", check=True, dry_run=True, verbosity=0)
    except SystemExit as exc:
        pytest.fail(f"the models and the migrations disagree (makemigrations --check exited {exc.code})")
