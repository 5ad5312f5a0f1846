"""What the management commands share: argparse types for their flags and the ``--database``
check. A command imports these from here, never from another command."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

from django.core.management.base import CommandError
from django.db import connections

from ..bounds import MAX_INTERVAL

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}


def duration(text: str) -> timedelta:
    """``30s``, ``250ms``, ``5m``, ``1h`` or plain seconds, as a positive timedelta."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (examples: 30s, 250ms, 5m, 1h)")
    seconds = float(match[1]) * _UNITS[match[2]]
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
    if seconds > MAX_INTERVAL.total_seconds():
        raise argparse.ArgumentTypeError(f"{text!r} must be at most 366 days")
    return timedelta(seconds=seconds)


def check_database(alias: str | None) -> None:
    """``--database``: an alias of DATABASES (a one-line CommandError otherwise)."""
    if alias is not None and alias not in connections:
        raise CommandError(f"--database {alias!r} is not in DATABASES (aliases: {', '.join(connections)})")


def port_number(text: str) -> int:
    """A TCP port, 0 (a free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} must be a port from 0 to 65535")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value
