"""django_lonnymq.logs: the formatter the settings name, and the default when they are unusable."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings

from django_lonnymq import logs


def _record() -> logging.LogRecord:
    return logging.makeLogRecord(
        {"msg": "hello %s", "args": ("x",), "levelname": "INFO", "name": "django_lonnymq.worker"}
    )


def test_default_format_has_a_timestamp() -> None:
    text = logs.build_formatter().format(_record())
    assert text.endswith(" INFO django_lonnymq.worker: hello x")
    assert text[:4].isdigit() and text[4] == "-"


@override_settings(LONNYMQ_LOG_FORMATTER="logging.Formatter", LONNYMQ_LOG_FORMAT="%(name)s says %(message)s")
def test_formatter_and_format_are_settings() -> None:
    formatter = logs.build_formatter()
    assert type(formatter) is logging.Formatter
    assert formatter.format(_record()) == "django_lonnymq.worker says hello x"


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("no.such.Formatter", "%(message)s"),
        ("logging.Formatter", "%(no_such_field)s"),
        ("os.getcwd", "%(message)s"),
    ],
)
def test_unusable_settings_fall_back_to_the_default(
    path: str, fmt: str, caplog: pytest.LogCaptureFixture
) -> None:
    with override_settings(LONNYMQ_LOG_FORMATTER=path, LONNYMQ_LOG_FORMAT=fmt):
        formatter = logs.build_formatter()
    assert formatter.format(_record()).endswith(" INFO django_lonnymq.worker: hello x")
    assert "unusable" in caplog.text and repr(path) in caplog.text
