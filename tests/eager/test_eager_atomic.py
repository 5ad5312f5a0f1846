"""Eager mode inside the code's own ``atomic()`` blocks, in a ``TestCase``.

A ``TestCase`` wraps each test in a transaction that never commits, so an ``on_commit``
callback never runs there. Eager mode runs a message enqueued inside the code's own
``atomic()`` when the outermost such block exits without error (where production commits),
and nothing for a block or savepoint that rolls back.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from asgiref.sync import async_to_sync
from django.db import connection, transaction
from django.test import AsyncClient, TestCase, override_settings

from django_lonnymq import Event, Item, Message, enqueue, enqueue_many, handler, publish_many
from django_lonnymq.models import Channel, Subscription, TaskResultRecord
from django_lonnymq.models import Message as MessageRow
from django_lonnymq.testing import eager
from tests.conftest import worker_env
from tests.testapp import tasks

RAN: list[object] = []


@handler("eager_atomic")
def remember(message: Message) -> None:
    RAN.append(message.payload["n"])
    Channel.objects.create(queue="eager_atomic_seen", name=str(message.payload["n"]))


@handler("eager_atomic_chain")
def enqueue_the_next(message: Message) -> None:
    RAN.append(("chain", message.payload["n"]))
    if message.payload["n"] < 3:
        with transaction.atomic():
            enqueue("eager_atomic_chain", {"n": message.payload["n"] + 1})


@pytest.fixture(autouse=True)
def _ran():
    RAN.clear()
    yield
    RAN.clear()


def seen() -> list[str]:
    return sorted(Channel.objects.filter(queue="eager_atomic_seen").values_list("name", flat=True))


@pytest.mark.django_db
def test_an_enqueue_in_an_atomic_block_runs_when_the_block_exits():
    with eager():
        with transaction.atomic():
            enqueue("eager_atomic", {"n": 1})
            assert RAN == []  # not before the block ends, as not before a commit
        assert RAN == [1]
    assert seen() == ["1"]


@pytest.mark.django_db
def test_nested_blocks_run_at_the_outermost_exit_only():
    with eager(), transaction.atomic():
        enqueue("eager_atomic", {"n": 1})
        with transaction.atomic():
            enqueue("eager_atomic", {"n": 2})
        assert RAN == []  # the inner block's exit is a savepoint, not a commit
        with transaction.atomic(savepoint=False):
            enqueue("eager_atomic", {"n": 3})
        assert RAN == []
    assert RAN == [1, 2, 3]


@pytest.mark.django_db
def test_an_inner_block_that_rolls_back_runs_nothing_and_the_rest_runs():
    with eager(), transaction.atomic():
        enqueue("eager_atomic", {"n": 1})
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            enqueue("eager_atomic", {"n": 2})
            raise ZeroDivisionError
        enqueue("eager_atomic", {"n": 3})
    assert RAN == [1, 3]
    assert seen() == ["1", "3"]


@pytest.mark.django_db
def test_a_savepoint_rolled_back_by_a_caught_exception_runs_nothing():
    def save_or_give_up() -> None:
        try:
            with transaction.atomic():
                enqueue("eager_atomic", {"n": 2})
                raise ValueError("bad row")
        except ValueError:
            pass

    with eager(), transaction.atomic():
        save_or_give_up()
    with eager():
        save_or_give_up()  # no outer block: the savepoint is the code's outermost block
    assert RAN == []
    assert not MessageRow.objects.exists()  # rolled back with its savepoint


@pytest.mark.django_db
def test_a_block_that_rolls_back_runs_nothing_then_the_next_block_runs_only_its_own():
    with eager():
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue("eager_atomic", {"n": 1})
            raise RuntimeError
        with transaction.atomic():
            enqueue("eager_atomic", {"n": 2})
    assert RAN == [2]


@pytest.mark.django_db
def test_enqueue_many_publish_and_a_task_run_at_the_block_exit():
    Subscription.objects.create(topic="eager.atomic", queue="eager_atomic")
    with eager(), transaction.atomic():
        enqueue_many("eager_atomic", [{"n": 1}, Item({"n": 2}, channel="other")])
        publish_many("eager.atomic", [Event({"n": 3}, key="k")])
        result = tasks.add.enqueue(2, 3)
        assert RAN == [] and TaskResultRecord.objects.get(id=result.id).status == "READY"
    assert sorted(RAN) == [1, 2, 3]
    record = TaskResultRecord.objects.get(id=result.id)
    assert record.status == "SUCCESSFUL" and record.return_value == 5


@pytest.mark.django_db
def test_a_handler_that_enqueues_in_its_own_block_runs_the_chain():
    with eager(), transaction.atomic():
        enqueue("eager_atomic_chain", {"n": 1})
    assert RAN == [("chain", 1), ("chain", 2), ("chain", 3)]


@pytest.mark.django_db
def test_capture_on_commit_callbacks_sees_only_the_projects_own():
    mine: list[str] = []
    with eager(), TestCase.captureOnCommitCallbacks(execute=True) as callbacks:
        with transaction.atomic():
            transaction.on_commit(lambda: mine.append("mine"))
            enqueue("eager_atomic", {"n": 1})
        assert RAN == [1]  # eager ran at the block's exit ...
        assert mine == []  # ... the project's callback waits for the capture, as before
    assert mine == ["mine"] and len(callbacks) == 1
    assert [entry[1] for entry in connection.run_on_commit] == [callbacks[0]]  # eager's are gone


@pytest.mark.django_db
def test_an_async_view_that_enqueues_in_a_sync_block_runs():
    with eager(), override_settings(ROOT_URLCONF="tests.eager.urls"):
        response = async_to_sync(AsyncClient().post)("/atomic-upload/", {"n": "5"})
    assert response.status_code == 200, response.content
    assert seen() == ["5"]


@pytest.mark.django_db(transaction=True)
def test_outside_a_testcase_it_still_runs_at_the_real_commit_and_not_on_rollback():
    with eager():
        with transaction.atomic():
            enqueue("eager_atomic", {"n": 1})
            with transaction.atomic():
                enqueue("eager_atomic", {"n": 2})
            assert RAN == []
        assert RAN == [1, 2]
        with pytest.raises(KeyError), transaction.atomic():
            enqueue("eager_atomic", {"n": 3})
            raise KeyError
    assert RAN == [1, 2]


FRESH_PROCESS = """
import sys, unittest
import django
django.setup()
from django.test.utils import setup_test_environment
setup_test_environment()
from example_project.videos.tests import UploadTests
result = unittest.TextTestRunner(verbosity=0).run(unittest.defaultTestLoader.loadTestsFromTestCase(UploadTests))
sys.exit(0 if result.wasSuccessful() and result.testsRun == 1 else 1)
"""


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
@pytest.mark.django_db
def test_the_first_block_of_a_fresh_process_is_watched():
    """In a process where nothing has used eager mode yet, the README's test (its view enqueues
    inside the first ``atomic()`` block that process opens) passes: watching starts when eager
    mode is turned on, before that block opens."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS],
        env=worker_env(DJANGO_SETTINGS_MODULE="tests.settings"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
