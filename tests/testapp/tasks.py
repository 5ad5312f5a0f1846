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
