"""One test per system check id in django_lonnymq/checks.py, run through Django's registry."""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest
from asgiref.local import Local
from django.core.checks import Error, run_checks
from django.core.checks.registry import registry
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections
from django.db.utils import ConnectionHandler
from django.test import override_settings

from django_lonnymq.tasks import task_backends  # django.tasks' on Django 6, the backport's on 5.2


def lonnymq_errors(*, everything: bool = False, schema: bool = False) -> list[Error]:
    """The errors the checks registered by django_lonnymq/checks.py report, called through
    Django's registry; ``everything``: all registered checks, as ``manage.py check`` runs them
    (that includes the Django Tasks backend's own check, lonnymq.E005)."""
    if everything:
        found = run_checks(databases=["default"])
    else:
        found = []
        for check in registry.registered_checks:
            # W210 reads the database: only for the tests that allow it (schema=True).
            if check.__module__ == "django_lonnymq.checks" and (
                schema or check.__name__ != "check_schema_installed"
            ):
                found += check(app_configs=None, databases=["default"])
    return [e for e in found if e.id and e.id.startswith("lonnymq.")]


@contextmanager
def queue_alias(alias: str):
    """LONNYMQ_DATABASE=alias, with task backends rebuilt on the way in and out."""
    task_backends._connections = Local()
    try:
        with override_settings(LONNYMQ_DATABASE=alias):
            yield
    finally:
        task_backends._connections = Local()


@pytest.fixture(autouse=True)
def fresh_task_backends():
    """The Django Tasks backend reads LONNYMQ_DATABASE once, when it is built: build it anew
    for each test, and do not leave one built under overridden settings to later tests."""
    task_backends._connections = Local()
    yield
    task_backends._connections = Local()


def ids(errors: list[Error]) -> list[str]:
    return [e.id for e in errors]


@pytest.fixture
def sqlite_alias(settings):
    """A real second alias, ``lite``, on SQLite: in DATABASES and in the connection handler."""
    lite = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    databases = {**settings.DATABASES, "lite": lite}
    settings.DATABASES = databases
    # django.db.connections caches its settings (override_settings does not refresh them):
    # add the alias the way the handler configures it from DATABASES.
    connections.settings["lite"] = ConnectionHandler(databases).settings["lite"]
    try:
        yield "lite"
    finally:
        if hasattr(connections._connections, "lite"):
            connections["lite"].close()
            del connections["lite"]
        del connections.settings["lite"]


@pytest.mark.django_db
def test_the_test_settings_pass_every_check():
    assert lonnymq_errors(schema=True) == []
    assert lonnymq_errors(everything=True) == []


def test_the_checks_are_registered():
    names = {c.__name__ for c in registry.registered_checks if c.__module__ == "django_lonnymq.checks"}
    assert names == {
        "check_database",
        "check_queue_databases",
        "check_settings",
        "check_handler_modules",
        "check_worker_heartbeat",
        "check_schema_installed",
        "check_sampling",
        "check_handler_timeout",
        "check_health",
        "check_worker_synchronous_commit",
        "check_max_snoozes",
        "check_channel_idle_prune",
        "check_workflow_retention",
        "check_vacuum_threshold",
        "check_stats_count_cap",
        "check_cross_database_enqueue",
    }


# ---------------------------------------------------------------------------------------
# E001: the alias must exist and be PostgreSQL
# ---------------------------------------------------------------------------------------


def test_e001_alias_missing_from_databases():
    with queue_alias("nowhere"):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E001"]
    assert "'nowhere'" in errors[0].msg and "not in DATABASES" in errors[0].msg
    assert "default" in errors[0].hint


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.django_db  # W210 reads the default database
def test_e001_alias_is_not_postgresql(sqlite_alias):
    assert connections[sqlite_alias].vendor == "sqlite"
    with queue_alias(sqlite_alias):
        errors = lonnymq_errors()
        everything = lonnymq_errors(everything=True)
    assert ids(errors) == ["lonnymq.E001"]
    assert "needs PostgreSQL" in errors[0].msg and "sqlite" in errors[0].msg
    # E005 too: the tasks backend defaults to the queue's alias.
    assert sorted(ids(everything)) == ["lonnymq.E001", "lonnymq.E005"]
    # The same second alias is fine as long as the queue does not use it.
    assert lonnymq_errors(everything=True) == []


def test_manage_py_check_reports_e001_for_a_missing_alias_instead_of_crashing():
    with queue_alias("nowhere"), pytest.raises(SystemCheckError, match="lonnymq.E001"):
        call_command("check", verbosity=0)
    call_command("check", verbosity=0)  # and passes with the real settings


# ---------------------------------------------------------------------------------------
# E002: durations must be positive
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LEASE", 0),
        ("LEASE", -5),
        ("LEASE", timedelta(seconds=-1)),
        ("POLL_INTERVAL", "soon"),
        ("RETRY_BACKOFF_BASE", None),
        ("WAKE_TOLERANCE", timedelta(0)),
        ("DEDUP_WINDOW", 0.0001),  # rounds to 0 ms
    ],
)
def test_e002_non_positive_duration(name, value):
    with override_settings(**{f"LONNYMQ_{name}": value}):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E002"]
    assert f"LONNYMQ_{name}" in errors[0].msg and repr(value) in errors[0].msg


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LEASE", timedelta(days=2)),
        ("WAKE_TOLERANCE", 86_401),
        ("DEDUP_WINDOW", timedelta(days=400)),
        ("POLL_INTERVAL", float("inf")),
        ("RETRY_BACKOFF_MAX", float("nan")),
    ],
)
def test_e002_duration_too_long_for_the_sql_functions(name, value):
    with override_settings(**{f"LONNYMQ_{name}": value}):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E002"]
    assert f"LONNYMQ_{name}" in errors[0].msg and "at most" in errors[0].msg


def test_e002_accepts_timedeltas_and_seconds():
    with override_settings(LONNYMQ_LEASE=timedelta(minutes=2), LONNYMQ_POLL_INTERVAL=0.5):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# E003: MAX_ATTEMPTS
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 1001, "5", 2.0, True, None])
def test_e003_max_attempts_out_of_range(value):
    with override_settings(LONNYMQ_MAX_ATTEMPTS=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E003"]
    assert "LONNYMQ_MAX_ATTEMPTS" in errors[0].msg


@pytest.mark.parametrize("value", [1, 1000])
def test_e003_max_attempts_bounds_are_allowed(value):
    with override_settings(LONNYMQ_MAX_ATTEMPTS=value):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# E004: MAX_PAYLOAD_BYTES
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 8 * 1024 * 1024 + 1, "1MB", False, 1.5])
def test_e004_payload_limit_out_of_range(value):
    with override_settings(LONNYMQ_MAX_PAYLOAD_BYTES=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E004"]
    assert "LONNYMQ_MAX_PAYLOAD_BYTES" in errors[0].msg


def test_several_bad_settings_are_all_reported():
    with override_settings(LONNYMQ_LEASE=0, LONNYMQ_MAX_ATTEMPTS=0, LONNYMQ_MAX_PAYLOAD_BYTES=0):
        assert sorted(ids(lonnymq_errors())) == ["lonnymq.E002", "lonnymq.E003", "lonnymq.E004"]


# ---------------------------------------------------------------------------------------
# E005 (django_lonnymq/tasks.py): the Django Tasks backend needs PostgreSQL
# ---------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.django_db  # W210 reads the default database
def test_e005_task_backend_on_a_non_postgresql_alias(sqlite_alias, settings):
    settings.TASKS = {
        "default": {"BACKEND": "django_lonnymq.tasks.LonnyMQBackend", "OPTIONS": {"DATABASE": sqlite_alias}}
    }
    errors = lonnymq_errors(everything=True)
    assert ids(errors) == ["lonnymq.E005"]
    assert "'default'" in errors[0].msg and "PostgreSQL" in errors[0].msg


# ---------------------------------------------------------------------------------------
# E006: LONNYMQ_HANDLER_MODULES
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "modules", [["no_such_module_anywhere"], ["django_lonnymq.no_such_child"], "tests.testapp.handlers"]
)
def test_e006_handler_modules_that_cannot_be_imported(modules):
    with override_settings(LONNYMQ_HANDLER_MODULES=modules):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E006"]
    assert "LONNYMQ_HANDLER_MODULES" in errors[0].msg


def test_e006_accepts_modules_that_exist():
    with override_settings(LONNYMQ_HANDLER_MODULES=["tests.testapp.handlers"]):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# W210: the queue's database has every migration of the app
# ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_w210_a_migration_not_applied():
    from django.db import transaction

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "DELETE FROM django_migrations WHERE app = 'django_lonnymq' AND name = '0007_paused_state'"
            )
        errors = lonnymq_errors(schema=True)
        raise Undo  # the row comes back
    assert ids(errors) == ["lonnymq.W210"]
    assert "0007_paused_state" in errors[0].msg and "'default'" in errors[0].msg
    assert "python manage.py migrate" in errors[0].msg and "python manage.py migrate" in errors[0].hint
    assert lonnymq_errors(schema=True) == []


# ---------------------------------------------------------------------------------------
# E210: the workers' sampling interval and how long samples are kept
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LONNYMQ_SAMPLE_INTERVAL", 0.5),
        ("LONNYMQ_SAMPLE_INTERVAL", timedelta(days=2)),
        ("LONNYMQ_SAMPLE_INTERVAL", "soon"),
        ("LONNYMQ_SAMPLE_KEEP", 30),
        ("LONNYMQ_SAMPLE_KEEP", None),
        ("LONNYMQ_SAMPLE_KEEP", True),
    ],
)
def test_e210_sampling_out_of_bounds(name, value):
    with override_settings(**{name: value}):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E210"]
    assert name in errors[0].msg and repr(value) in errors[0].msg


def test_e210_accepts_none_and_bounds():
    with override_settings(LONNYMQ_SAMPLE_INTERVAL=None, LONNYMQ_SAMPLE_KEEP=timedelta(days=366)):
        assert lonnymq_errors() == []
    with override_settings(LONNYMQ_SAMPLE_INTERVAL=1, LONNYMQ_SAMPLE_KEEP=60):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# E170: LONNYMQ_HANDLER_TIMEOUT
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, timedelta(0), float("nan"), "5m", timedelta(days=400), True])
def test_e170_handler_timeout_must_be_none_or_a_positive_duration(value):
    with override_settings(LONNYMQ_HANDLER_TIMEOUT=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E170"]
    assert "LONNYMQ_HANDLER_TIMEOUT" in errors[0].msg


@pytest.mark.parametrize("value", [None, 0.5, 300, timedelta(minutes=5)])
def test_e170_accepts_none_and_positive_durations(value):
    with override_settings(LONNYMQ_HANDLER_TIMEOUT=value):
        assert lonnymq_errors() == []


@pytest.mark.parametrize("value", [0, -1, timedelta(days=400), "a week", float("nan")])
def test_e002_covers_the_event_retention(value):
    """LONNYMQ_EVENT_RETENTION (durable handlers' events): a positive duration of at most 366
    days, named with the value it was given."""
    with override_settings(LONNYMQ_EVENT_RETENTION=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E002"] and "LONNYMQ_EVENT_RETENTION" in errors[0].msg
    assert repr(value) in errors[0].msg


@pytest.mark.parametrize("name", ["INTERRUPT_GRACE", "CANCEL_GRACE"])
def test_e002_covers_the_grace_periods(name):
    with override_settings(**{f"LONNYMQ_{name}": timedelta(days=2)}):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E002"] and f"LONNYMQ_{name}" in errors[0].msg


# ---------------------------------------------------------------------------------------
# E220: the alarms of lonnymq_health and the dashboard
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LONNYMQ_HEALTH_MAX_READY_AGE", 0),
        ("LONNYMQ_HEALTH_MAX_READY_AGE", -5),
        ("LONNYMQ_HEALTH_MAX_READY_AGE", "5m"),
        ("LONNYMQ_HEALTH_MAX_READY_AGE", timedelta(days=400)),
        ("LONNYMQ_HEALTH_MAX_READY_AGE", True),
        ("LONNYMQ_HEALTH_REQUIRE_WORKERS", "yes"),
        ("LONNYMQ_HEALTH_REQUIRE_WORKERS", None),
        ("LONNYMQ_HORIZON_ALARM", 0),
        ("LONNYMQ_HORIZON_ALARM", "5m"),
        ("LONNYMQ_HORIZON_ALARM", timedelta(days=400)),
        ("LONNYMQ_HORIZON_ALARM", False),
    ],
)
def test_e220_health_settings_out_of_bounds(name, value):
    with override_settings(**{name: value}):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E220"]
    assert name in errors[0].msg and repr(value) in errors[0].msg


def test_e220_accepts_none_durations_and_bools():
    with override_settings(LONNYMQ_HEALTH_MAX_READY_AGE=None, LONNYMQ_HEALTH_REQUIRE_WORKERS=False):
        assert lonnymq_errors() == []
    with override_settings(LONNYMQ_HEALTH_MAX_READY_AGE=30, LONNYMQ_HEALTH_REQUIRE_WORKERS=True):
        assert lonnymq_errors() == []
    with override_settings(LONNYMQ_HORIZON_ALARM=None):
        assert lonnymq_errors() == []
    with override_settings(LONNYMQ_HORIZON_ALARM=0.5):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# W210 stays quiet while it cannot help: during migrate, and beside the app's own errors
# ---------------------------------------------------------------------------------------


@contextmanager
def migration_missing():
    """The app's newest migration recorded as not applied (the row comes back afterwards);
    yields its name."""
    from django.db import transaction

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "DELETE FROM django_migrations WHERE id = (SELECT max(id) FROM django_migrations"
                " WHERE app = 'django_lonnymq') RETURNING name"
            )
            (name,) = cursor.fetchone()
        yield name
        raise Undo


@pytest.mark.django_db
def test_w210_is_not_printed_by_migrate_itself():
    from io import StringIO

    with migration_missing() as name:
        checked, migrated = StringIO(), StringIO()
        call_command("check", "--database", "default", stdout=checked, stderr=checked)
        call_command("migrate", "--plan", stdout=migrated, stderr=migrated)
    assert "lonnymq.W210" in checked.getvalue()  # the control: the same state warns elsewhere
    assert name in migrated.getvalue()  # migrate saw the missing migration...
    assert "lonnymq.W210" not in migrated.getvalue()  # ...and was not told to run itself


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.django_db
def test_w210_is_not_given_beside_an_error_that_stops_migrate(sqlite_alias, settings):
    with migration_missing():
        assert ids(lonnymq_errors(everything=True)) == ["lonnymq.W210"]  # the control
        settings.TASKS = {
            "default": {
                "BACKEND": "django_lonnymq.tasks.LonnyMQBackend",
                "OPTIONS": {"DATABASE": sqlite_alias},
            }
        }
        assert ids(lonnymq_errors(everything=True)) == ["lonnymq.E005"]
        settings.TASKS = {}
        with override_settings(LONNYMQ_MAX_ATTEMPTS=0):
            assert ids(lonnymq_errors(everything=True)) == ["lonnymq.E003"]


# ---------------------------------------------------------------------------------------
# E230: LONNYMQ_WORKER_SYNCHRONOUS_COMMIT is one of PostgreSQL's synchronous_commit values
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "maybe", "ON", True, 1, None, "off; DROP TABLE x", "on -c x=y"])
def test_e230_worker_synchronous_commit_must_be_a_synchronous_commit_value(value):
    with override_settings(LONNYMQ_WORKER_SYNCHRONOUS_COMMIT=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E230"]
    assert "LONNYMQ_WORKER_SYNCHRONOUS_COMMIT" in errors[0].msg and repr(value) in errors[0].msg


@pytest.mark.parametrize("value", ["on", "off", "local", "remote_write", "remote_apply"])
def test_e230_accepts_the_synchronous_commit_values(value):
    with override_settings(LONNYMQ_WORKER_SYNCHRONOUS_COMMIT=value):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# E240: LONNYMQ_MAX_SNOOZES is an integer from 0 to 1000000
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, 1_000_001, 2.0, "100", None, True])
def test_e240_max_snoozes_must_be_a_bounded_integer(value):
    with override_settings(LONNYMQ_MAX_SNOOZES=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E240"]
    assert "LONNYMQ_MAX_SNOOZES" in errors[0].msg and repr(value) in errors[0].msg


@pytest.mark.parametrize("value", [0, 3, 100, 1_000_000])
def test_e240_accepts_integers_in_bounds(value):
    with override_settings(LONNYMQ_MAX_SNOOZES=value):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# E280: LONNYMQ_CHANNEL_IDLE_PRUNE is None or a positive duration of at most 366 days
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, timedelta(days=367), "1 day", True, timedelta(0)])
def test_e280_channel_idle_prune_must_be_none_or_a_bounded_duration(value):
    with override_settings(LONNYMQ_CHANNEL_IDLE_PRUNE=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E280"]
    assert "LONNYMQ_CHANNEL_IDLE_PRUNE" in errors[0].msg and repr(value) in errors[0].msg


@pytest.mark.parametrize("value", [None, 1, 0.5, timedelta(days=1), timedelta(days=366)])
def test_e280_accepts_none_and_durations_in_bounds(value):
    with override_settings(LONNYMQ_CHANNEL_IDLE_PRUNE=value):
        assert lonnymq_errors() == []


def test_workflow_retention_is_none_or_a_bounded_duration(settings):
    from datetime import timedelta

    from django_lonnymq.checks import check_workflow_retention

    for good in (None, 0, timedelta(days=7), timedelta(days=366)):
        settings.LONNYMQ_WORKFLOW_RETENTION = good
        assert check_workflow_retention() == [], good
    for bad in (-1, timedelta(days=367), "a week", True):
        settings.LONNYMQ_WORKFLOW_RETENTION = bad
        assert [e.id for e in check_workflow_retention()] == ["lonnymq.E290"], bad


# E270: LONNYMQ_VACUUM_THRESHOLD is None or an integer from 0 to 1000000000
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, 10**9 + 1, 2.0, "10000", True])
def test_e270_vacuum_threshold_must_be_none_or_a_bounded_integer(value):
    with override_settings(LONNYMQ_VACUUM_THRESHOLD=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E270"]
    assert "LONNYMQ_VACUUM_THRESHOLD" in errors[0].msg and repr(value) in errors[0].msg


@pytest.mark.parametrize("value", [None, 0, 10_000, 10**9])
def test_e270_accepts_none_and_integers_in_bounds(value):
    with override_settings(LONNYMQ_VACUUM_THRESHOLD=value):
        assert lonnymq_errors() == []


# ---------------------------------------------------------------------------------------
# E300: LONNYMQ_STATS_COUNT_CAP is an integer from 1 to 1000000000
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 10**9 + 1, 1000.0, "1000", True, None])
def test_e300_stats_count_cap_must_be_a_bounded_integer(value):
    from django_lonnymq.sampling import count_cap

    with override_settings(LONNYMQ_STATS_COUNT_CAP=value):
        errors = lonnymq_errors()
        used = count_cap()
    assert ids(errors) == ["lonnymq.E300"]
    assert "LONNYMQ_STATS_COUNT_CAP" in errors[0].msg and repr(value) in errors[0].msg
    assert 1 <= used <= 10**9  # the figures use an allowed value meanwhile


@pytest.mark.parametrize("value", [1, 1000, 100_000, 10**9])
def test_e300_accepts_integers_in_bounds(value):
    from django_lonnymq.sampling import count_cap

    with override_settings(LONNYMQ_STATS_COUNT_CAP=value):
        assert lonnymq_errors() == []
        assert count_cap() == value


# ---------------------------------------------------------------------------------------
# E310: LONNYMQ_CROSS_DATABASE_ENQUEUE is "warn", "raise" or "allow"
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["WARN", "error", "", None, True, 1])
def test_e310_cross_database_enqueue_must_be_warn_raise_or_allow(value):
    with override_settings(LONNYMQ_CROSS_DATABASE_ENQUEUE=value):
        errors = lonnymq_errors()
    assert ids(errors) == ["lonnymq.E310"]
    assert "LONNYMQ_CROSS_DATABASE_ENQUEUE" in errors[0].msg and repr(value) in errors[0].msg


@pytest.mark.parametrize("value", ["warn", "raise", "allow"])
def test_e310_accepts_warn_raise_and_allow(value):
    with override_settings(LONNYMQ_CROSS_DATABASE_ENQUEUE=value):
        assert lonnymq_errors() == []
