"""How a statement function runs its statement: through ``db.py``, on what ``on`` names
(``statements/__init__.py`` lists them), and the registry of the functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import db

try:
    import psycopg
except ImportError:  # psycopg2 users: no psycopg connection is ever passed
    psycopg = None  # type: ignore[assignment]

Row = db.Row
# None or a Django alias; a psycopg connection; or an object with run(name, params).
On = Any

# Statement name -> its function: exactly one each (the house test reads it).
FUNCTIONS: dict[str, Callable[..., Any]] = {}


def statement(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in FUNCTIONS:
            raise RuntimeError(f"statement {name!r} has two functions")
        FUNCTIONS[name] = fn
        fn.statement = name  # type: ignore[attr-defined]
        return fn

    return register


def rows(
    name: str, params: db.Params, on: On, *, arrays: bool = False, prepare: bool = True, model: Any = None
) -> list[Any]:
    """Every row of statement ``name`` on ``on`` (see the module's docstring)."""
    if model is not None:
        return db.models(model, name, params, using=on)
    if on is None or isinstance(on, str):
        return db.rows(name, params, using=on, arrays=arrays)
    if psycopg is not None and isinstance(on, psycopg.Connection):
        return db.run(on, name, params, prepare=prepare)
    if not prepare:
        return on.run(name, params, prepare=False)
    return on.run(name, params)


def value(name: str, params: db.Params, on: On, *, arrays: bool = False, prepare: bool = True) -> Any:
    """The first column of the first row of statement ``name`` (None: no row)."""
    found = rows(name, params, on, arrays=arrays, prepare=prepare)
    return found[0][0] if found else None


def typed(rowtype: Any, name: str, params: db.Params, on: On, **options: Any) -> list[Any]:
    """:func:`rows` as ``rowtype`` (a NamedTuple: fields by name, still a tuple)."""
    return [rowtype(*row) for row in rows(name, params, on, **options)]
