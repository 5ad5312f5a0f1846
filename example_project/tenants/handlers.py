"""Handlers of the example project: they simulate work of very different sizes."""

import os
import time

from django.utils import timezone

from django_lonnymq import Message, handler

from .models import JobRun


@handler("transcode")
def transcode(message: Message) -> None:
    """Pretend to transcode a video (the payload says how long it takes), then record the run.

    The record is written before the worker acks, so a crash between the two shows up as a
    second row for the same message: the queue delivers at least once.
    """
    started_at = timezone.now()
    seconds = float(message.payload.get("seconds", 0.0))
    time.sleep(seconds)
    JobRun.objects.create(
        message_id=message.id,
        tenant=message.channel,
        seconds=seconds,
        attempt=message.attempt,
        worker_pid=os.getpid(),
        started_at=started_at,
        finished_at=timezone.now(),
    )
