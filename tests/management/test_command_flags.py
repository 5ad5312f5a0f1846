"""Bad flags and bad aliases end a command with one CommandError line, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.core.management import call_command, get_commands, load_command_class
from django.core.management.base import CommandError

from tests.conftest import ROOT, worker_env

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("command", "args", "says"),
    [
        ("run_queue_worker", ["--queue", "t_record", "--lease", "99999999999h"], "at most 366 days"),
        ("run_queue_worker", ["--queue", "t_record", "--lease", "2d"], "not a duration"),
        ("run_queue_worker", ["--queue", "t_record", "--lease", "48h"], "--lease must be between 1s and 24h"),
        ("run_queue_worker", ["--queue", "t_record", "--database", "nope"], "--database 'nope' is not in DATABASES"),
        ("run_queue_worker", ["--queue", "t_record", "--metrics-port", "70000"], "a port from 0 to 65535"),
        ("run_queue_worker", ["--queue", "t_record", "--metrics-port", "http"], "not a port number"),
        ("lonnymq_health", ["--max-ready-age", "-1"], "number of seconds from 0 to 366 days"),
        ("lonnymq_stats", ["--record", "--keep", "99999999999h"], "at most 366 days"),
        ("lonnymq_stats", ["--database", "nope"], "--database 'nope' is not in DATABASES"),
        ("lonnymq_health", ["--database", "nope"], "--database 'nope' is not in DATABASES"),
        ("lonnymq_health", ["--lease-grace", "nan"], "number of seconds from 0 to 366 days"),
        ("lonnymq_health", ["--check-grace", "inf"], "number of seconds from 0 to 366 days"),
        ("lonnymq_spark_export", ["--input", "/nonexistent", "--queue", "q", "--channel-col", "c"], "does not exist"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_a_command_error(command, args, says):
    with pytest.raises(CommandError, match=says.replace("(", r"\(")):
        call_command(command, *args)


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_from_the_command_line_it_is_one_line_and_no_traceback():
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "run_queue_worker", "--queue", "t_record", "--database", "nope"],
        cwd=ROOT, env=worker_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == ["CommandError: --database 'nope' is not in DATABASES (aliases: default)"]


# The fewest arguments each of the app's commands that take --database needs to reach it.
NEEDS = {
    "run_queue_worker": ["--queue", "t_record"],
    "lonnymq_queue": ["pause", "t_record"],
    "lonnymq_spark_export": ["--input", str(ROOT / "README.md"), "--queue", "q", "--channel-col", "c"],
}


def _commands_with_database() -> list[str]:
    found = []
    for name, app in sorted(get_commands().items()):
        if app != "django_lonnymq":
            continue
        parser = load_command_class(app, name).create_parser("manage.py", name)
        if any("--database" in action.option_strings for action in parser._actions):
            found.append(name)
    return found


def test_every_command_refuses_an_unknown_database_naming_the_known_aliases():
    commands = _commands_with_database()
    assert {"run_queue_worker", "lonnymq_queue", "lonnymq_stats", "lonnymq_health"} <= set(commands)
    runs = [(name, NEEDS.get(name, [])) for name in commands] + [("lonnymq_queue", ["status"])]
    for name, args in runs:
        with pytest.raises(CommandError) as refused:
            call_command(name, *args, "--database", "nosuch")
        assert str(refused.value) == "--database 'nosuch' is not in DATABASES (aliases: default, other)", name
