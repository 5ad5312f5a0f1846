"""Handler registration refuses what a worker could not run as a handler."""

from __future__ import annotations

import functools

import pytest

from django_lonnymq import handler
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.registry import _handlers


@pytest.fixture(autouse=True)
def _forget():
    before = dict(_handlers)
    yield
    _handlers.clear()
    _handlers.update(before)


def test_a_generator_function_is_refused_at_registration():
    def gen(message):  # type: ignore[no-untyped-def]
        yield message

    with pytest.raises(
        InvalidArgument, match="handler must be a function or an async def function, not a generator"
    ):
        handler("unit_gen")(gen)
    assert "unit_gen" not in _handlers


def test_a_callable_object_whose_call_yields_is_refused():
    class Yields:
        def __call__(self, message):  # type: ignore[no-untyped-def]
            yield message

    class InheritsIt(Yields):
        pass

    with pytest.raises(InvalidArgument, match="not a generator"):
        handler("unit_gen_obj")(Yields())
    with pytest.raises(InvalidArgument, match="not a generator"):
        handler("unit_gen_inherited")(InheritsIt())


def test_an_async_generator_is_refused_and_a_plain_function_registers():
    async def agen(message):  # type: ignore[no-untyped-def]
        yield message

    with pytest.raises(InvalidArgument, match="not an async generator"):
        handler("unit_agen")(agen)

    def plain(message):  # type: ignore[no-untyped-def]
        return None

    assert handler("unit_plain")(plain) is plain and _handlers["unit_plain"] is plain


def test_a_generator_behind_a_decorator_that_says_what_it_wraps_is_refused():
    def logged(func):  # type: ignore[no-untyped-def]
        @functools.wraps(func)
        def wrapper(message):  # type: ignore[no-untyped-def]
            return func(message)

        return wrapper

    def twice(func):  # type: ignore[no-untyped-def]
        @functools.wraps(func)
        async def wrapper(message):  # type: ignore[no-untyped-def]
            return func(message)

        return wrapper

    def gen(message):  # type: ignore[no-untyped-def]
        yield message

    async def agen(message):  # type: ignore[no-untyped-def]
        yield message

    with pytest.raises(InvalidArgument, match="not a generator"):
        handler("unit_wrapped_gen")(logged(gen))
    with pytest.raises(InvalidArgument, match="not a generator"):
        handler("unit_wrapped_twice")(logged(logged(gen)))
    with pytest.raises(InvalidArgument, match="not an async generator"):
        handler("unit_wrapped_agen")(twice(agen))
    with pytest.raises(InvalidArgument, match="not an async generator"):
        handler("unit_wrapped_agen_sync")(logged(agen))
    assert not {
        "unit_wrapped_gen",
        "unit_wrapped_twice",
        "unit_wrapped_agen",
        "unit_wrapped_agen_sync",
    } & set(_handlers)
