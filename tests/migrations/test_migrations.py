"""The migration installs and removes everything: up, down to zero, up, down, up.

The models and the hand-written SQL agree (``makemigrations --check`` is clean).
"""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from django_lonnymq import sql

CORE_TABLES = {"lonnymq_channel", "lonnymq_message", "lonnymq_dedup", "lonnymq_dead_message"}
# Views too: information_schema.tables lists them (lonnymq_workflow_edge is one).
CREATE_TABLE = re.compile(r"CREATE (?:TABLE|VIEW) (?:IF NOT EXISTS )?(\w+)", re.IGNORECASE)


def expected_objects() -> tuple[set[str], set[str]]:
    """Tables (and views) and functions the schema files define (what all migrations leave)."""
    text = sql.schema()
    return set(CREATE_TABLE.findall(text)), set(sql.functions(text))


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


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
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


@pytest.mark.django_db
def test_makemigrations_check_is_clean():
    try:
        call_command("makemigrations", "django_lonnymq", check=True, dry_run=True, verbosity=0)
    except SystemExit as exc:
        pytest.fail(f"the models and the migrations disagree (makemigrations --check exited {exc.code})")
