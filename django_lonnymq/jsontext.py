"""Checks of JSON text that PostgreSQL's jsonb would refuse, without parsing it (no Django here:
the Spark executors use it too).

jsonb refuses a ``\\u0000`` escape, a surrogate escape that is not half of a pair, and the
literals ``NaN``, ``Infinity`` and ``-Infinity`` that some JSON writers (Spark's ``to_json``,
Python's ``json`` by default) produce. Each check runs a cheap substring test first.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from itertools import accumulate
from typing import Any

# An escape that is not itself an escaped backslash ("\\\\u0000" is the text \u0000).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_SURROGATE_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE_PAIR = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
# For nesting depth: a string (escapes included), a run of other scalar text, and what is
# neither a bracket nor a stand-in "()" for a scalar.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_SCALAR = re.compile(r"[^\[\]{}()\s,:]+")
_NOT_A_STEP = re.compile(r"[^\[\]{}()]+")
_NOT_A_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "(": 1, "]": -1, "}": -1, ")": -1}


def has_nul_escape(text: str) -> bool:
    return "\\u0000" in text and _NUL_ESCAPE.search(text) is not None


def has_lone_surrogate(text: str) -> bool:
    """A surrogate escaped alone in the text, or a lone surrogate character in it."""
    if ("\\ud" in text or "\\uD" in text) and _SURROGATE_ESCAPE.search(_SURROGATE_PAIR.sub("", text)):
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def depth(text: str) -> int:
    """The level of the deepest value of the JSON ``text``, the root being level 0.

    ``1`` and ``[]`` are 0 deep, ``[1]`` and ``[[]]`` 1, ``{"a": [1]}`` 2: the measure of
    ``jsonb_path_exists(payload, 'strict $.**{n}')`` in the schema (a value at level n).
    Scans the text without parsing it (no recursion, any depth); expects valid JSON.
    """
    return _value_depth(_STRING.sub("()", text))


def deeper_than(text: str, limit: int) -> int | None:
    """The depth of the JSON ``text`` when it is more than ``limit``, else None.

    Cheap for the usual payload: a value at level ``d`` sits inside ``d`` containers, so its
    text holds at least ``d`` opening brackets and ``2 * d + 1`` characters; a text without
    that many is not scanned. Then the containers' nesting alone bounds the depth from above.
    """
    if len(text) <= 2 * limit or text.count("[") + text.count("{") <= limit:
        return None
    unquoted = _STRING.sub("()", text)
    if _nesting(_NOT_A_BRACKET.sub("", unquoted)) <= limit:
        return None
    found = _value_depth(unquoted)
    return found if found > limit else None


def _value_depth(unquoted: str) -> int:
    # Every scalar (strings are "()" already) as "()", an empty container of its own: a
    # value at level d, container or scalar, then opens d + 1 brackets.
    return _nesting(_NOT_A_STEP.sub("", _SCALAR.sub("()", unquoted))) - 1


def _nesting(steps: str) -> int:
    """How many brackets are open at most, in a text of brackets alone."""
    return max(accumulate(map(_STEP.__getitem__, steps)), default=0)


def _refuse_constant(name: str) -> None:
    raise ValueError(name)


def has_non_finite(text: str) -> bool:
    """A bare NaN / Infinity / -Infinity literal (not the same words inside a string)."""
    if "NaN" not in text and "Infinity" not in text:
        return False
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except ValueError:
        return True
    return False


def suspicious(text: str) -> bool:
    """The cheap test: False means :func:`problem` has nothing to say about ``text``."""
    if "\\u0000" in text or "\\ud" in text or "\\uD" in text or "NaN" in text or "Infinity" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def problem(text: str) -> str | None:
    """Why jsonb would refuse ``text``, or None."""
    if has_nul_escape(text):
        return "contains a NUL character (\\u0000), which PostgreSQL's jsonb refuses"
    if has_lone_surrogate(text):
        return "contains a lone surrogate (invalid Unicode), which PostgreSQL's jsonb refuses"
    if has_non_finite(text):
        return "contains NaN or Infinity, which JSON (and PostgreSQL's jsonb) cannot hold"
    return None


class _Number(str):
    """A JSON number's text, kept as written (its stored size depends on its digits)."""

    __slots__ = ()


def _last_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)  # a repeated key: jsonb keeps the last value, as dict() does


def jsonb_size(text: str) -> int:
    """The bytes the JSON ``text`` takes as a jsonb value, as ``pg_column_size(text::jsonb)``
    reports it before any compression: the unit of the schema's size CHECKs, which can be
    six times the text's length (``[1,1,...]``: 2 characters, 12 bytes a number). Expects
    valid JSON nested at most a few hundred levels (it recurses once per level).

    The layout is PostgreSQL's (``jsonb_util.c``): a 4-byte varlena header; each container a
    4-byte header and a 4-byte entry per element (two per object member: keys first, in
    (length, bytes) order, then the values in the same order), aligned to 4 bytes; a string
    its UTF-8 bytes; a number a ``numeric`` aligned to 4 bytes; ``true``, ``false`` and
    ``null`` nothing more than their entry; a scalar at the root a one-element array."""
    value = json.loads(text, parse_int=_Number, parse_float=_Number, object_pairs_hook=_last_wins)
    if isinstance(value, (dict, list)):
        return _container_size(value, 4)
    return _value_size(value, 4 + 4 + 4)  # the root scalar's pseudo-array: header and entry


def _aligned(position: int) -> int:
    return (position + 3) & ~3


def _container_size(value: dict[str, Any] | list[Any], position: int) -> int:
    position = _aligned(position) + 4
    if isinstance(value, list):
        position += 4 * len(value)
        for item in value:
            position = _value_size(item, position)
        return position
    keys = sorted(((key.encode("utf-8"), key) for key in value), key=lambda pair: (len(pair[0]), pair[0]))
    position += 8 * len(keys)
    for encoded, _ in keys:
        position += len(encoded)
    for _, key in keys:
        position = _value_size(value[key], position)
    return position


def _value_size(value: Any, position: int) -> int:
    if isinstance(value, _Number):
        return _aligned(position) + _numeric_size(value)
    if isinstance(value, str):
        return position + len(value.encode("utf-8"))
    if isinstance(value, (dict, list)):
        return _container_size(value, position)
    return position  # true, false, null: their entry says it all


@lru_cache(maxsize=4096)  # a long array repeats its numbers
def _numeric_size(number: str) -> int:
    """The bytes of PostgreSQL's ``numeric`` read from a JSON number's text (numeric_in):
    base-10000 digits of 2 bytes, without leading or trailing zero groups, after a 2-byte
    header (4 when the scale passes 63 or the weight leaves -64..63) and the varlena's 4."""
    mantissa, _, exponent_text = number.lstrip("-").lower().partition("e")
    exponent = int(exponent_text or 0)
    whole, _, fraction = mantissa.partition(".")
    scale = max(0, len(fraction) - exponent)
    digits = whole + fraction
    first_weight = len(whole) - 1 + exponent  # the power of ten of the first digit
    significant = digits.lstrip("0")
    first_weight -= len(digits) - len(significant)
    significant = significant.rstrip("0")
    if not significant:
        weight, groups = 0, 0
    else:
        weight = first_weight // 4
        leading = (weight + 1) * 4 - (first_weight + 1)  # zeros before the first digit in its group
        groups = (leading + len(significant) + 3) // 4
    short = scale <= 63 and -64 <= weight <= 63
    return 4 + (2 if short else 4) + 2 * groups


def storable(text: str | None) -> str | None:
    """``text`` as a PostgreSQL text column can hold it: a NUL character (which no text value
    may hold) becomes the four characters ``\\x00``, and a lone surrogate (not UTF-8) its
    escape ``\\udXXX``. Everything else is kept as it is."""
    if text is None:
        return None
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class Undecodable:
    """A stored payload Python's json cannot decode (nested deeper than it goes, a number
    longer than ``int`` reads): its message fails alone instead of stopping its reader."""

    __slots__ = ("error",)

    def __init__(self, error: str):
        self.error = error

    def __repr__(self) -> str:
        return f"<payload that cannot be decoded: {self.error}>"


_decoder = json.JSONDecoder()


def decode(data: str | bytes) -> Any:
    """A payload read from jsonb (UTF-8 text), or :class:`Undecodable` saying why not."""
    try:
        return _decoder.decode(data.decode() if isinstance(data, bytes) else data)
    except (RecursionError, ValueError) as exc:
        return Undecodable(f"{type(exc).__name__}: {exc}")
