"""A payload the queue cannot store says what failed and what to pass instead; a dict with
keys that are not strings is refused instead of coming back with string keys."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_lonnymq import arguments
from django_lonnymq.exceptions import PayloadError


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"at": datetime(2026, 1, 1, 12)}, "value.isoformat()"),
        ({"on": [date(2026, 1, 1)]}, "value.isoformat()"),
        ({"amount": Decimal("9.99")}, "str(value)"),
        ({"id": uuid.uuid4()}, "str(value)"),
        ({"user": User(pk=3, username="ann")}, "obj.pk"),
        ({"tags": {"a", "b"}}, "as a list"),
        ({"ratio": float("nan")}, "pass None or a string"),
    ],
)
def test_an_unserializable_value_says_what_to_pass(value: Any, says: str) -> None:
    with pytest.raises(PayloadError) as caught:
        arguments.payload(value)
    text = str(caught.value)
    assert "must be JSON-serializable" in text and says in text, text


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ({1: "a"}, "1 (int)"),
        ({"outer": [{"ok": 1}, {2.5: "b"}]}, "2.5 (float)"),
        ({"nested": {"deeper": {None: 1}}}, "None (NoneType)"),
        ([{"fine": 1}, ({True: 1},)], "True (bool)"),
    ],
)
def test_a_key_that_is_not_a_string_is_refused_by_name(value: Any, key: str) -> None:
    with pytest.raises(PayloadError, match="must be strings") as caught:
        arguments.payload(value)
    assert f"has the key {key}" in str(caught.value)


def test_string_keys_and_braces_in_strings_pass() -> None:
    assert (
        arguments.payload({"a": {"b": [1, {"c": "{not an object}"}]}})
        == '{"a":{"b":[1,{"c":"{not an object}"}]}}'
    )
    assert arguments.payload(["{", "}"]) == '["{","}"]'
