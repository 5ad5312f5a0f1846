"""Handler registration: the only way a message finds code (a payload never names code)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from . import arguments
from .bounds import MAX_BATCH_WAIT, MAX_HANDLER_BATCH, MAX_INTERVAL
from .durations import duration_ms
from .exceptions import InvalidArgument, NoHandler

HandlerFunc = Callable[[Any], Any]
F = TypeVar("F", bound=HandlerFunc)

_handlers: dict[str, HandlerFunc] = {}
# The handler of a queue that has none of its own (a task backend that accepts any queue name).
_fallback: HandlerFunc | None = None
# Per-handler timeouts in ms (a queue missing here takes LONNYMQ_HANDLER_TIMEOUT).
_timeouts: dict[str, int] = {}
# Batch handlers (@handler(queue, batch=N)): how many messages one call takes, and for how long
# a worker collects them.
_batches: dict[str, BatchSpec] = {}
# The batch_wait of a batch handler that names none (seconds).
DEFAULT_BATCH_WAIT = 1.0
# Called by autodiscover() after the handler modules are imported: how other parts of the
# app (the Django Tasks backend) register handlers without this module importing them.
_discovery_hooks: list[Callable[[], Any]] = []


@dataclass(frozen=True)
class BatchSpec:
    """A batch handler's call: up to ``size`` messages of one channel, collected for at most
    ``wait`` seconds."""

    size: int
    wait: float


def handler(
    queue: str,
    *,
    timeout: timedelta | float | None = None,
    batch: int | None = None,
    batch_wait: timedelta | float | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of ``queue``'s messages.

    The function (``def`` or ``async def``) receives a :class:`~django_lonnymq.Message`.
    Returning acks the message; raising retries it with backoff; ``Retry(delay)`` retries
    after ``delay``; ``Discard`` moves it to the dead-letter table. Past ``timeout`` (default
    ``LONNYMQ_HANDLER_TIMEOUT``) the handler is interrupted and the message fails with
    reason ``timeout``.

    With ``batch=N`` it receives a list of up to N messages, all of one channel, collected
    for at most ``batch_wait`` (default 1 s): returning acks them all in one call, raising
    applies to each, and :class:`~django_lonnymq.exceptions.BatchFailed` fails only the
    messages it names (docs/limits-and-progress.md, "Batches").
    """
    arguments.queue(queue)
    timeout_ms = handler_timeout_ms("timeout", timeout) if timeout is not None else None
    spec = batch_spec(batch, batch_wait)

    def register(func: F) -> F:
        if not callable(func):
            raise InvalidArgument("handler", "must be callable", func)
        # A call would return a generator without running the body. Looked for through
        # decorators that say what they wrap (functools.wraps sets __wrapped__); a run that
        # returns a generator anyway fails (worker/outcomes.py).
        candidates = _what_runs(func)
        if any(inspect.isasyncgenfunction(each) for each in candidates):
            raise InvalidArgument(
                "handler", "must be a function or an async def function, not an async generator", func
            )
        if any(inspect.isgeneratorfunction(each) for each in candidates):
            raise InvalidArgument(
                "handler", "must be a function or an async def function, not a generator (it yields)", func
            )
        existing = _handlers.get(queue)
        if existing is not None and existing is not func and _qualname(existing) != _qualname(func):
            raise InvalidArgument(
                "queue",
                f"already has a handler ({_qualname(existing)})",
                queue,
                message=f"queue {queue!r} already has a handler: {_qualname(existing)}",
            )
        _handlers[queue] = func
        if timeout_ms is None:
            _timeouts.pop(queue, None)
        else:
            _timeouts[queue] = timeout_ms
        if spec is None:
            _batches.pop(queue, None)
        else:
            _batches[queue] = spec
        return func

    return register


def batch_spec(batch: Any, batch_wait: Any) -> BatchSpec | None:
    """``batch`` and ``batch_wait`` checked (None: not a batch handler)."""
    if batch is None:
        if batch_wait is not None:
            raise InvalidArgument(
                "batch_wait", "needs batch=N (it is how long a batch is collected)", batch_wait
            )
        return None
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise InvalidArgument("batch", "must be an integer", batch)
    if not 1 <= batch <= MAX_HANDLER_BATCH:
        raise InvalidArgument("batch", f"must be between 1 and {MAX_HANDLER_BATCH}", batch)
    if batch_wait is None:
        return BatchSpec(batch, DEFAULT_BATCH_WAIT)
    wait_ms = duration_ms("batch_wait", batch_wait)
    if wait_ms > MAX_BATCH_WAIT // timedelta(milliseconds=1):
        raise InvalidArgument("batch_wait", "must be at most 5 minutes", batch_wait)
    return BatchSpec(batch, wait_ms / 1000)


def batch_of(queue: str) -> BatchSpec | None:
    """The batch of ``queue``'s handler (None: it takes one message per call)."""
    return _batches.get(queue)


def _what_runs(func: Any) -> list[Any]:
    """``func``, its class's ``__call__`` and what each wraps (``__wrapped__``, innermost last)."""
    found: list[Any] = []
    for each in (func, _call_of(func)):
        for _ in range(100):  # a chain of decorators, never a cycle
            if each is None or any(each is seen for seen in found):
                break
            found.append(each)
            each = getattr(each, "__wrapped__", None)
    return found


def _call_of(func: Any) -> Any:
    """What calling a callable object runs (its class's ``__call__``), None for a function."""
    return None if inspect.isroutine(func) else inspect.getattr_static(type(func), "__call__", None)


def handler_timeout_ms(field: str, value: Any) -> int:
    """A handler timeout in ms: a positive duration of at most 366 days."""
    ms = duration_ms(field, value, MAX_INTERVAL)
    if ms < 1:
        raise InvalidArgument(field, "must be positive (at least 1 ms)", value)
    return ms


def timeout_of(queue: str) -> float | None:
    """The timeout of ``queue``'s handler in seconds (its own, else LONNYMQ_HANDLER_TIMEOUT)."""
    from .conf import settings, to_ms

    if queue in _timeouts:
        return _timeouts[queue] / 1000
    default = settings.HANDLER_TIMEOUT
    return to_ms(default) / 1000 if default is not None else None


def is_async(func: HandlerFunc) -> bool:
    """Whether ``func`` is an ``async def`` handler (or an object with an async ``__call__``)."""
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(type(func).__call__)


def _qualname(func: HandlerFunc) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def get_handler(queue: str) -> HandlerFunc:
    """The handler of ``queue``; :class:`NoHandler` names the queues that have one."""
    try:
        return _handlers[queue]
    except KeyError:
        if _fallback is not None:
            return _fallback
        known = ", ".join(sorted(_handlers)) or "none"
        raise NoHandler(
            f"no handler is registered for queue {queue!r} (queues with handlers: {known}). "
            "Decorate a function with @handler(...) in an app's handlers.py or a module "
            "listed in LONNYMQ_HANDLER_MODULES."
        ) from None


def registered_queues() -> list[str]:
    """The queues that have a handler registered (the fallback apart), sorted."""
    return sorted(_handlers)


def register_default(queue: str, func: HandlerFunc) -> None:
    """Make ``func`` the handler of ``queue`` unless one is registered already."""
    _handlers.setdefault(queue, func)


def set_fallback(func: HandlerFunc | None) -> None:
    """Make ``func`` the handler of every queue without one (None: no such handler)."""
    global _fallback
    _fallback = func


def add_discovery_hook(hook: Callable[[], Any]) -> None:
    """Run ``hook`` at every :func:`autodiscover`, after the handler modules are imported."""
    if hook not in _discovery_hooks:
        _discovery_hooks.append(hook)


def unregister(queue: str) -> None:
    """Forget a queue's handler (for tests)."""
    _handlers.pop(queue, None)
    _timeouts.pop(queue, None)
    _batches.pop(queue, None)


def autodiscover() -> None:
    """Import every installed app's ``handlers`` module and LONNYMQ_HANDLER_MODULES."""
    from importlib import import_module

    from django.utils.module_loading import autodiscover_modules

    from .conf import settings

    autodiscover_modules("handlers")
    for module in settings.HANDLER_MODULES:
        import_module(module)
    from django.conf import settings as django_settings

    # A configured backend of this app is loaded the way Django loads any backend (by its
    # dotted path); its module adds the hook that registers its queues' handlers.
    for config in getattr(django_settings, "TASKS", {}).values():
        backend = str(config.get("BACKEND", ""))
        if backend.startswith(f"{__package__}."):
            import_module(backend.rsplit(".", 1)[0])
    for hook in list(_discovery_hooks):
        hook()
