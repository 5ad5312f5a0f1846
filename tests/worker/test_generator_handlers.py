"""A handler whose call returns a generator or an async generator ran none of its body: the
message fails with an error that says so (a worker and eager mode alike), never acked unrun.
Registration refuses a generator function, even behind functools.wraps; these handlers hide it
(a decorator that does not say what it wraps)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from django_lonnymq import enqueue, handler
from django_lonnymq.message import Message
from django_lonnymq.models import DeadMessage
from django_lonnymq.models import Message as MessageRow
from django_lonnymq.registry import unregister
from django_lonnymq.testing import drain, eager

ran: list[str] = []
lock = threading.Lock()


def _body(name: str) -> None:
    with lock:
        ran.append(name)


def gen(message: Message):  # type: ignore[no-untyped-def]
    _body("gen")
    yield message


async def agen(message: Message):  # type: ignore[no-untyped-def]
    _body("agen")
    yield message


def _sync_gen(message: Message) -> object:
    return gen(message)


def _sync_agen(message: Message) -> object:
    return agen(message)


async def _async_gen(message: Message) -> object:
    return gen(message)


async def _async_agen(message: Message) -> object:
    return agen(message)


HANDLERS = {
    "t_gen_sync_gen": (_sync_gen, "a generator"),
    "t_gen_sync_agen": (_sync_agen, "an async generator"),
    "t_gen_async_gen": (_async_gen, "a generator"),
    "t_gen_async_agen": (_async_agen, "an async generator"),
}


@pytest.fixture
def handlers() -> Iterator[None]:
    for queue, (func, _) in HANDLERS.items():
        handler(queue)(func)
    ran.clear()
    yield
    for queue in HANDLERS:
        unregister(queue)


def _assert_each_failed_unrun(ids: dict[str, int]) -> None:
    assert ran == []
    assert not MessageRow.objects.filter(id__in=ids.values()).exists()
    for queue, message_id in ids.items():
        dead = DeadMessage.objects.get(id=message_id)
        kind = HANDLERS[queue][1]
        assert dead.reason == "failed", queue
        assert f"the handler returned {kind} and ran none of its body (it yields)" in dead.last_error, queue


@pytest.mark.django_db(transaction=True)
def test_a_worker_fails_a_handler_that_returns_a_generator(handlers):
    ids = {queue: enqueue(queue, {"n": 1}, max_attempts=1) for queue in HANDLERS}
    stats = drain(*HANDLERS, concurrency=2)
    assert (stats.acked, stats.dead) == (0, 4), stats.summary()
    _assert_each_failed_unrun(ids)


@pytest.mark.django_db
def test_eager_mode_fails_a_handler_that_returns_a_generator(handlers):
    with eager():
        ids = {queue: enqueue(queue, {"n": 1}, max_attempts=1) for queue in HANDLERS}
    _assert_each_failed_unrun(ids)
