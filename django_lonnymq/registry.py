"""Handler registration: the only way a message finds code (a payload never names code)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .api import _name
from .exceptions import InvalidArgument, NoHandler

HandlerFunc = Callable[[Any], Any]
F = TypeVar("F", bound=HandlerFunc)

_handlers: dict[str, HandlerFunc] = {}
# The handler of a queue that has none of its own (a task backend that accepts any queue name).
_fallback: HandlerFunc | None = None
# Called by autodiscover() after the handler modules are imported: how other parts of the
# app (the Django Tasks backend) register handlers without this module importing them.
_discovery_hooks: list[Callable[[], Any]] = []


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
        if _fallback is not None:
            return _fallback
        known = ", ".join(sorted(_handlers)) or "none"
        raise NoHandler(
            f"no handler is registered for queue {queue!r} (queues with handlers: {known}). "
            "Decorate a function with @handler(...) in an app's handlers.py or a module "
            "listed in LONNYMQ_HANDLER_MODULES."
        ) from None


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
