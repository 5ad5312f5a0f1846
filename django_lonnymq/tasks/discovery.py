"""Which tasks exist: ``Task`` objects in installed apps' ``tasks`` modules (and
``OPTIONS["TASK_MODULES"]``); a payload can only name one of these, never arbitrary code."""

from __future__ import annotations

import contextlib
from importlib import import_module
from typing import Any

from ..exceptions import (
    UnknownTask,
)
from .framework import Task

_known_tasks: dict[str, Task] | None = None


def _scan(module: Any, found: dict[str, Task]) -> None:
    for value in vars(module).values():
        if isinstance(value, Task):
            found[value.module_path] = value


def known_tasks(extra_modules: list[str] | None = None) -> dict[str, Task]:
    """Every ``Task`` object of the installed apps' ``tasks`` modules (and extra modules)."""
    global _known_tasks
    if _known_tasks is None or extra_modules:
        from django.apps import apps

        found: dict[str, Task] = dict(_known_tasks or {})
        for config in apps.get_app_configs():
            with contextlib.suppress(ModuleNotFoundError):
                module = import_module(f"{config.name}.tasks")
                _scan(module, found)
        for name in extra_modules or []:
            _scan(import_module(name), found)
        _known_tasks = found
    return _known_tasks


def find_task(path: str, backend: Any = None) -> Task:  # a LonnyMQBackend or None (no import: it calls this)
    """The registered ``Task`` at ``path``; never imports a path taken from a payload."""
    tasks = known_tasks(backend.task_modules if backend else None)
    if path not in tasks:
        raise UnknownTask(
            f"{path!r} is not a @task found in an installed app's tasks module or OPTIONS['TASK_MODULES']"
        )
    return tasks[path]
