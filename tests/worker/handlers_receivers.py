"""A handler and a ``message_finished`` receiver for the receiver tests, loaded by worker
processes through ``LONNYMQ_HANDLER_MODULES`` (settings_receivers)."""

from __future__ import annotations

import time
from typing import Any

from django.dispatch import receiver

from django_lonnymq import Message, handler, signals
from tests.testapp.handlers import record


@handler("acc_receivers")
def run_and_record(message: Message) -> None:
    record(message, "start")
    record(message, "done")


@receiver(signals.message_finished)
def record_finished(sender: Any, message: Message, outcome: str, **kwargs: Any) -> None:
    """Writes one ``received`` row through Django's connection, then sleeps as long as the
    payload's ``receiver_seconds`` (a slow receiver)."""
    if message.queue != "acc_receivers":
        return
    record(message, f"received:{outcome}")
    time.sleep(float(message.payload.get("receiver_seconds", 0)))
