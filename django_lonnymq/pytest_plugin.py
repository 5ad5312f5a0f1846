"""pytest fixtures for the tests of a project that uses the queue (docs/testing.md).

Installing the package registers this module as a pytest plugin (the ``pytest11`` entry
point), so the fixtures need no import. They stand on pytest-django's ``db`` and
``transactional_db``. This module imports nothing from Django: a project without Django
settings starts pytest as before, and Django is imported only by a test that asks for one
of these fixtures.

- ``lonnymq_eager``: eager mode for the test (:func:`django_lonnymq.testing.eager`).
- ``lonnymq_drain``: :func:`django_lonnymq.testing.drain`, in a test whose writes commit.
- ``lonnymq_enqueued``: what the queue holds, with the assertions of
  :mod:`django_lonnymq.testing`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .models import Message
    from .worker import Stats


class Enqueued:
    """The messages waiting or in flight in a queue, and assertions on them.

    Each method is the helper of the same name in :mod:`django_lonnymq.testing`, which
    matches and words the failures.
    """

    def __call__(self, queue: str, *, channel: str | None = None, using: str | None = None) -> list[Message]:
        """The messages of ``queue`` (optionally one channel), oldest first."""
        from .testing import enqueued

        return enqueued(queue, channel=channel, using=using)

    def payloads(self, queue: str, *, channel: str | None = None, using: str | None = None) -> list[Any]:
        """Their payloads, oldest first."""
        return [message.payload for message in self(queue, channel=channel, using=using)]

    def assert_enqueued(
        self,
        queue: str,
        *,
        channel: str | None = None,
        payload: Any = None,
        count: int | None = None,
        using: str | None = None,
    ) -> list[Message]:
        """Fail unless ``queue`` holds matching messages (exactly ``count`` of them, if given)."""
        from .testing import assert_enqueued

        return assert_enqueued(queue, channel=channel, payload=payload, count=count, using=using)

    def assert_nothing_enqueued(
        self, queue: str, *, channel: str | None = None, using: str | None = None
    ) -> None:
        """Fail if ``queue`` (or one of its channels) holds a message."""
        from .testing import assert_nothing_enqueued

        assert_nothing_enqueued(queue, channel=channel, using=using)


@pytest.fixture
def lonnymq_eager(db: None) -> Iterator[None]:
    """Eager mode for the whole test: each message's handler runs in-process when its
    enqueue commits, which in a test's transaction is at once."""
    from .testing import eager

    with eager():
        yield


@pytest.fixture
def lonnymq_real_sleeps(lonnymq_eager: None) -> Iterator[None]:
    """Eager mode in which durable sleeps suspend their message, as a worker's do, until
    ``django_lonnymq.testing.resume(id)``; waits resume on ``api.emit_event``."""
    from .testing import eager_sleeps

    with eager_sleeps():
        yield


@pytest.fixture
def lonnymq_drain(transactional_db: None) -> Callable[..., Stats]:
    """``drain(*queues, concurrency=1, batch_size=None, using=None)``: run the real worker
    in-process until ``queues`` (every queue with messages when none is named) hold nothing
    ready. The test's writes commit (``transactional_db``) so the worker's connections see them."""
    from .testing import drain

    return drain


@pytest.fixture
def lonnymq_enqueued(db: None) -> Enqueued:
    """An :class:`Enqueued`: ``lonnymq_enqueued("emails")`` lists a queue's messages;
    ``.assert_enqueued(...)``, ``.assert_nothing_enqueued(...)`` and ``.payloads(...)`` check them."""
    return Enqueued()
