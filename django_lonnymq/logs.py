"""The worker's log output: Python's ``logging``, loggers under ``django_lonnymq``.

A project that configures logging for ``django_lonnymq`` (or the root logger) keeps its
handlers; ``django_lonnymq.logs.Formatter`` is there for its ``LOGGING`` if it wants the
worker's format. Otherwise ``run_queue_worker`` adds one console handler (stderr) whose
formatter ``LONNYMQ_LOG_FORMATTER`` names (default this module's :class:`Formatter`), with
the format ``LONNYMQ_LOG_FORMAT`` (timestamps by default).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.utils.module_loading import import_string

from .conf import DEFAULTS, settings

LOGGER = "django_lonnymq"


class Formatter(logging.Formatter):
    """A ``logging.Formatter`` whose format defaults to ``LONNYMQ_LOG_FORMAT``."""

    def __init__(self, fmt: str | None = None, datefmt: str | None = None, style: Any = "%", **kwargs: Any):
        super().__init__(fmt or settings.LOG_FORMAT, datefmt, style, **kwargs)


def build_formatter() -> logging.Formatter:
    """The formatter the settings ask for; the default one (and a warning) when they are unusable."""
    path, fmt = settings.LOG_FORMATTER, settings.LOG_FORMAT
    try:
        kind = import_string(path) if isinstance(path, str) else path
        formatter = kind(fmt)
        if not isinstance(formatter, logging.Formatter):
            raise TypeError(f"{path!r} is not a logging.Formatter")
        formatter.format(logging.makeLogRecord({"msg": "probe", "levelname": "INFO", "name": LOGGER}))
        return formatter
    except Exception as exc:  # a bad setting must not stop the worker: say so, keep the default
        logging.getLogger(LOGGER).warning(
            "LONNYMQ_LOG_FORMATTER=%r / LONNYMQ_LOG_FORMAT=%r unusable (%s); using the default format",
            path,
            fmt,
            exc,
        )
        return logging.Formatter(DEFAULTS["LOG_FORMAT"])


def configure_console() -> logging.Handler | None:
    """One stderr handler on the ``django_lonnymq`` logger, unless logging already reaches a
    handler from it (the project configured one). Returns the handler it added, if any."""
    logger = logging.getLogger(LOGGER)
    if logger.hasHandlers():
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(build_formatter())
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    return handler
