"""``lonnymq_prune_task_results``: finished results older than the age go, nothing else does."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_lonnymq.models import TaskResultRecord

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def row(name: str, status: str, age_days: float | None, *, queue: str = "default", backend: str = "default") -> None:
    finished = NOW - timedelta(days=age_days) if age_days is not None else None
    TaskResultRecord.objects.create(
        id=name,
        backend=backend,
        task_path="tests.testapp.tasks.add",
        queue=queue,
        channel="default",
        status=status,
        enqueued_at=NOW - timedelta(days=60),
        finished_at=finished,
    )


@pytest.fixture
def results() -> None:
    row("ok-old", "SUCCESSFUL", 20)
    row("ok-new", "SUCCESSFUL", 3)
    row("failed-old", "FAILED", 20)
    row("failed-new", "FAILED", 3)
    row("ready", "READY", None)
    row("running", "RUNNING", None)
    row("other-queue-old", "SUCCESSFUL", 20, queue="tasks_other")
    row("other-backend-old", "SUCCESSFUL", 20, backend="elsewhere")


def prune(*args: str) -> str:
    out = io.StringIO()
    call_command("lonnymq_prune_task_results", *args, stdout=out)
    return out.getvalue()


def left() -> list[str]:
    return sorted(TaskResultRecord.objects.values_list("id", flat=True))


def test_default_prunes_finished_results_older_than_14_days(results: None) -> None:
    assert prune("--batch-size", "1") == "Deleted 3 task result(s)\n"
    assert left() == ["failed-new", "ok-new", "other-backend-old", "ready", "running"]


def test_queue_and_failed_age(results: None) -> None:
    assert prune("--queue-name", "default", "--failed-min-age-days", "1") == "Deleted 3 task result(s)\n"
    assert left() == ["ok-new", "other-backend-old", "other-queue-old", "ready", "running"]


def test_dry_run_deletes_nothing(results: None) -> None:
    assert prune("--dry-run", "--min-age-days", "0") == "Would delete 5 task result(s)\n"
    assert len(left()) == 8


def test_never_touches_unfinished_results(results: None) -> None:
    prune("--min-age-days", "0")
    assert left() == ["other-backend-old", "ready", "running"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "nope"], "'nope'"),
        (["--queue-name", " , "], "--queue-name"),
    ],
)
def test_bad_arguments_are_command_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        prune(*args)


@pytest.mark.parametrize("value", ["-1", "x", "36501"])
def test_bad_ages_are_refused(value: str, capsys: Any) -> None:
    with pytest.raises(CommandError):
        call_command("lonnymq_prune_task_results", "--min-age-days", value)
