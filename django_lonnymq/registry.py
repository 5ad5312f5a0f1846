"""Handler registration: the only way a message finds code (a payload never names code)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .api import _name
from .exceptions import InvalidArgument, NoHandler

HandlerFunc = Callable[[Any], Any]
F = TypeVar("F", bound=HandlerFunc)

_handlers: dict[str, HandlerFunc] = {}


def handler(queue: str) -> Callable[[F], F]:
    """Register the decorated function as the handler of ``queue``'s messages.

    The function receives a :class:`~django_lonnymq.Message`. Returning acks the message;
    raising retries it with backoff; ``Retry(delay)`` retries after ``delay``; ``Discard``
    moves it to the dead-letter table.
    """
    _name("queue", queue, 100)

    def register(func: F) -> F:
        if not callable(func):
            raise InvalidArgument("handler", "must be callable", func)
        existing = _handlers.get(queue)
        if existing is not None and existing is not func and _qualname(existing) != _qualname(func):
            raise InvalidArgument(
                "queue",
                f"already has a handler ({_qualname(existing)})",
                queue,
                message=f"queue {queue!r} already has a handler: {_qualname(existing)}",
            )
        _handlers[queue] = func
        return func

    return register


def _qualname(func: HandlerFunc) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def get_handler(queue: str) -> HandlerFunc:
    """The handler of ``queue``; :class:`NoHandler` names the queues that have one."""
    try:
        return _handlers[queue]
    except KeyError:
        known = ", ".join(sorted(_handlers)) or "none"
        raise NoHandler(
            f"no handler is registered for queue {queue!r} (queues with handlers: {known}). "
            "Decorate a function with @handler(...) in an app's handlers.py or a module "
            "listed in LONNYMQ_HANDLER_MODULES."
        ) from None


def registered_queues() -> list[str]:
    return sorted(_handlers)


def unregister(queue: str) -> None:
    """Forget a queue's handler (for tests)."""
    _handlers.pop(queue, None)


def autodiscover() -> None:
    """Import every installed app's ``handlers`` module and LONNYMQ_HANDLER_MODULES."""
    from importlib import import_module

    from django.utils.module_loading import autodiscover_modules

    from .conf import settings

    autodiscover_modules("handlers")
    for module in settings.HANDLER_MODULES:
        import_module(module)
    from django.conf import settings as django_settings

    if any(
        str(c.get("BACKEND", "")).endswith("LonnyMQBackend")
        for c in getattr(django_settings, "TASKS", {}).values()
    ):
        from .tasks import register_task_handlers

        register_task_handlers()
