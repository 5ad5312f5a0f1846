"""The interruption machinery on real threads and a real event loop (no database):
django_lonnymq.worker.running.Control, and the handler options of @handler."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

from django_lonnymq import handler
from django_lonnymq.exceptions import HandlerCancelled, HandlerTimeout, InvalidArgument
from django_lonnymq.message import Message
from django_lonnymq.registry import get_handler, is_async, timeout_of, unregister
from django_lonnymq.worker.running import CANCELLED, TIMEOUT, Control


def message(message_id: int = 1, queue: str = "q") -> Message:
    return Message(id=message_id, queue=queue, channel="c", payload={}, attempt=1, max_attempts=3, enqueued_at=None)  # type: ignore[arg-type]


class Ticker:
    """Calls control.tick() every millisecond on a thread, as the worker's loop does."""

    def __init__(self, control: Control):
        self.control = control
        self.abandoned: list[Message] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.abandoned += self.control.tick()
            time.sleep(0.001)

    def __enter__(self) -> Ticker:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self.thread.join(5)


def naps(seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.005)
    return "finished"


def test_a_python_loop_past_its_timeout_is_interrupted():
    control = Control({"q": 0.2}, cancel_grace=0.1, interrupt_grace=5)
    caught: list[BaseException] = []

    def handler_body() -> str:
        try:
            return naps(5)
        except HandlerTimeout as exc:
            caught.append(exc)
            raise

    with Ticker(control):
        started = time.monotonic()
        assert control.run(message(), handler_body) == (None, TIMEOUT)
    assert 0.19 <= time.monotonic() - started < 1.5
    assert len(caught) == 1  # raised in the handler, where it was running


def test_run_reports_the_interruption_the_handler_turned_into_a_result():
    control = Control({"q": 0.1}, cancel_grace=0.1, interrupt_grace=5)

    def swallowing() -> str:
        try:
            return naps(5)
        except HandlerTimeout:
            return "stopped"

    with Ticker(control):
        assert control.run(message(), swallowing) == ("stopped", TIMEOUT)


def test_a_cancel_sets_the_flag_then_interrupts_after_the_grace():
    control = Control({"q": None}, cancel_grace=0.3, interrupt_grace=5)
    target = message()
    seen: dict[str, float] = {}
    # Measured from when the cancel is planned, not from when the body starts: under load the
    # body's thread may start late, and the flag would then come less than 0.1 s into it.
    start = time.monotonic()

    def body() -> str:
        try:
            while True:
                if target.cancel_requested and "flag" not in seen:
                    seen["flag"] = time.monotonic() - start
                time.sleep(0.005)
        except HandlerCancelled:
            seen["interrupted"] = time.monotonic() - start
            return "cancelled"

    threading.Timer(0.1, lambda: control.cancel([target])).start()
    with Ticker(control):
        assert control.run(target, body) == ("cancelled", CANCELLED)
    assert 0.09 <= seen["flag"] < 0.5
    assert 0.28 <= seen["interrupted"] - seen["flag"] < 1.0  # the flag is polled every 5 ms


def test_a_handler_that_ignores_the_interruption_is_abandoned_after_the_grace():
    control = Control({"q": 0.1}, cancel_grace=0.1, interrupt_grace=0.3)
    target = message()
    with Ticker(control) as ticker:
        started = time.monotonic()
        result = control.run(target, lambda: time.sleep(1.0) or "late")  # C call: cannot be entered
        # The interruption lands as soon as sleep returns: it reached our code, not a result.
        assert result == (None, TIMEOUT)
    assert ticker.abandoned == [target]
    assert 0.95 <= time.monotonic() - started < 3


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_an_interruption_never_escapes_after_the_run_ended():
    """Runs that end exactly at their timeout, hundreds of times: an interruption raised as
    the handler returns is cleared or caught, never delivered into the code that follows."""
    control = Control({"q": 0.002}, cancel_grace=0.1, interrupt_grace=5)
    stray: list[BaseException] = []
    outcomes = {None: 0, TIMEOUT: 0}
    with Ticker(control):
        for n in range(300):
            try:
                _, reason = control.run(message(n), lambda: naps(0.002))
                outcomes[reason] += 1
                naps(0.003)  # Python code after the run: a stray exception would land here
            except HandlerTimeout as exc:
                stray.append(exc)
    assert not stray
    assert sum(outcomes.values()) == 300
    assert outcomes[TIMEOUT] > 0, "no run reached its timeout: the race was not exercised"


def test_an_async_run_is_cancelled_at_its_timeout():
    control = Control({"q": 0.2}, cancel_grace=0.1, interrupt_grace=5)

    async def slow() -> str:
        await asyncio.sleep(5)
        return "finished"

    async def main() -> tuple[object, str | None, BaseException | None]:
        return await control.arun(message(), slow)

    with Ticker(control):
        started = time.monotonic()
        result, reason, exc = asyncio.run(main())
    assert result is None and reason == TIMEOUT and isinstance(exc, asyncio.CancelledError)
    assert 0.19 <= time.monotonic() - started < 1.5


# ---------------------------------------------------------------------------------------
# @handler options
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        (0, "positive"),
        (-1, "negative"),
        (timedelta(0), "positive"),
        (timedelta(seconds=-5), "negative"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ("5s", "timedelta or a number"),
        (True, "timedelta or a number"),
        (timedelta(days=400), "at most"),
    ],
)
def test_a_bad_timeout_is_refused_when_the_handler_is_declared(value, rule):
    with pytest.raises(InvalidArgument) as caught:
        handler("opt_bad", timeout=value)
    assert caught.value.field == "timeout" and rule in str(caught.value)


def test_a_timeout_is_kept_per_queue_and_the_setting_is_the_default(settings):
    try:

        @handler("opt_timed", timeout=timedelta(seconds=90))
        def timed(message: Message) -> None: ...

        @handler("opt_default")
        def untimed(message: Message) -> None: ...

        assert timeout_of("opt_timed") == 90
        assert timeout_of("opt_default") is None
        settings.LONNYMQ_HANDLER_TIMEOUT = timedelta(minutes=5)
        assert timeout_of("opt_default") == 300 and timeout_of("opt_timed") == 90
    finally:
        unregister("opt_timed")
        unregister("opt_default")


def test_an_async_handler_registered_twice_for_a_queue_is_refused():
    try:

        @handler("opt_async")
        async def first(message: Message) -> None: ...

        with pytest.raises(InvalidArgument) as caught:

            @handler("opt_async")
            async def second(message: Message) -> None: ...

        assert "already has a handler" in str(caught.value) and "first" in str(caught.value)
        assert get_handler("opt_async") is first and is_async(first)
        handler("opt_async")(first)  # the same function again (a module imported twice) is fine
    finally:
        unregister("opt_async")


def test_an_async_generator_is_not_a_handler():
    async def generator(message: Message):  # type: ignore[no-untyped-def]
        yield message

    with pytest.raises(InvalidArgument) as caught:
        handler("opt_gen")(generator)
    assert caught.value.field == "handler"
