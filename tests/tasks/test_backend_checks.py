"""LonnyMQBackend.check(): one test per id (lonnymq.E190-E195), run as ``manage.py check`` runs
them, through the framework's own check of every task backend."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import modify_settings

BACKEND = "django_lonnymq.tasks.LonnyMQBackend"


def backend_errors(settings: Any, **config: Any) -> list[Any]:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], **config}}
    return [e for e in run_checks() if (e.id or "").startswith("lonnymq.")]


def ids(errors: list[Any]) -> list[str]:
    return [e.id for e in errors]


def test_a_good_configuration_passes(settings: Any) -> None:
    options = {
        "CHANNEL_KWARG": "tenant_id",
        "DEFAULT_CHANNEL": "shared",
        "DATABASE": "default",
        "MAX_ATTEMPTS": 1,
        "TASK_MODULES": ["tests.testapp.tasks"],
    }
    assert backend_errors(settings, OPTIONS=options) == []
    assert backend_errors(settings, QUEUES=[]) == []


def test_e190_app_missing_from_installed_apps(settings: Any) -> None:
    with modify_settings(INSTALLED_APPS={"remove": "django_lonnymq"}):
        errors = backend_errors(settings)
    assert ids(errors) == ["lonnymq.E190"]
    assert "django_lonnymq is not in INSTALLED_APPS" in errors[0].msg


def test_e191_unknown_option(settings: Any) -> None:
    errors = backend_errors(settings, OPTIONS={"CHANNEL_KWARGS": "tenant_id"})
    assert ids(errors) == ["lonnymq.E191"]
    assert "'CHANNEL_KWARGS'" in errors[0].msg and "CHANNEL_KWARG" in errors[0].hint


@pytest.mark.parametrize("value", [0, 1001, "3", True, 2.0])
def test_e192_max_attempts_out_of_range(settings: Any, value: Any) -> None:
    errors = backend_errors(settings, OPTIONS={"MAX_ATTEMPTS": value})
    assert ids(errors) == ["lonnymq.E192"]
    assert repr(value) in errors[0].msg


@pytest.mark.parametrize(
    ("option", "value"), [("DEFAULT_CHANNEL", ""), ("DEFAULT_CHANNEL", "a\x00b"), ("CHANNEL_KWARG", 7)]
)
def test_e193_channel_options(settings: Any, option: str, value: Any) -> None:
    errors = backend_errors(settings, OPTIONS={option: value})
    assert ids(errors) == ["lonnymq.E193"]
    assert option in errors[0].msg


@pytest.mark.parametrize("modules", ["tests.testapp.tasks", ["tests.testapp.no_such_module"]])
def test_e194_task_modules(settings: Any, modules: Any) -> None:
    errors = backend_errors(settings, OPTIONS={"TASK_MODULES": modules})
    assert ids(errors) == ["lonnymq.E194"]


def test_e195_queue_name_the_queue_refuses(settings: Any) -> None:
    errors = backend_errors(settings, QUEUES=["default", "q" * 101, "  "])
    assert ids(errors) == ["lonnymq.E195", "lonnymq.E195"]


def test_manage_py_check_fails_on_them(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_ATTEMPTS": 0}}}
    with pytest.raises(SystemCheckError, match="lonnymq.E192"):
        call_command("check")
