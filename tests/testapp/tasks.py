"""Django Tasks run by the LonnyMQ task backend in tests."""

from __future__ import annotations

from django.db import connection

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="tasks_other")
def note(text: str, tenant_id: str = "") -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testapp_delivery (event, channel, payload) VALUES ('task', %s, to_jsonb(%s::text))",
            [tenant_id, text],
        )
    return text.upper()


@task()
def explode(times: int = 1) -> None:
    raise ValueError(f"exploded {times}")


@task(takes_context=True)
def attempt_number(context) -> int:  # type: ignore[no-untyped-def]
    return context.attempt


@task()
def returns_set() -> set[int]:
    return {1, 2}


@task()
def exits(code: int = 3) -> None:
    raise SystemExit(code)


@task()
def interrupts() -> None:
    raise KeyboardInterrupt


@task()
def sleeps(seconds: float) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testapp_delivery (event, channel, payload) VALUES ('task start', '', to_jsonb(%s::float))",
            [seconds],
        )
    __import__("time").sleep(seconds)
    return "slept"


def not_a_task() -> int:
    """A plain function beside the tasks: a message naming it must never run it."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO testapp_delivery (event) VALUES ('not_a_task ran')")
    return 1


@task()
async def add_later(a: int, b: int) -> int:
    """An ``async def`` task (the backend supports them)."""
    import asyncio

    await asyncio.sleep(0.01)
    return a + b


# Runs of snooze_then_add, by key: the first run of each key snoozes.
SNOOZED: set[str] = set()


@task()
def snooze_then_add(key: str, a: int, b: int) -> int:
    """Snoozes on its first run (no attempt spent), then adds."""
    from django_lonnymq import Snooze

    if key not in SNOOZED:
        SNOOZED.add(key)
        raise Snooze(0.01)
    return a + b


@task()
def total_of_parents(extra: int = 0) -> int:
    """A workflow step: the sum of its parents' (integer) outputs, plus ``extra``."""
    from django_lonnymq.workflows import parent_outputs

    return sum(v for v in parent_outputs().values() if isinstance(v, int)) + extra


@task()
def writes_then_fails(name: str) -> None:
    """Writes a row, then fails: in eager mode the write goes with the task's savepoint."""
    from django_lonnymq.models import Channel

    Channel.objects.create(queue="eager_task_write", name=name)
    raise RuntimeError("after the write")
