"""A queue database that takes no writes (a hot standby, a read-only role or transaction):
every queue call raises :class:`DatabaseReadOnly`, saying so, instead of Django's untyped
InternalError (SQLSTATE 25006)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_lonnymq import Workflow, api, enqueue, enqueue_many
from django_lonnymq.exceptions import DatabaseReadOnly, LonnyMQError

pytestmark = pytest.mark.django_db


def start_workflow() -> int:
    flow = Workflow("read only")
    flow.step("t_record", {})
    return flow.start()


CALLS = {
    "enqueue": lambda: enqueue("t_record", {"n": 1}),
    "enqueue_many": lambda: enqueue_many("t_record", [{"n": 1}, {"n": 2}]),
    "configure_channel": lambda: api.configure_channel("t_record", "acme", max_concurrency=2),
    "pause_queue": lambda: api.pause_queue("t_record"),
    "workflow start": start_workflow,
}


@pytest.mark.parametrize("call", list(CALLS.values()), ids=list(CALLS))
def test_a_read_only_database_raises_a_typed_error_saying_so(call):
    with pytest.raises(DatabaseReadOnly) as raised, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
        call()
    error = raised.value
    assert isinstance(error, LonnyMQError)
    assert getattr(error.__cause__.__cause__, "sqlstate", None) == "25006"
    assert "read-only transaction" in error.detail
    assert "the queue's database is read-only" in str(error) and "nothing was written" in str(error)
    # The savepoint's rollback ended the read-only mode: the same call writes now.
    call()
