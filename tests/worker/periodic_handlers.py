"""Schedules and the handler of worker-process tests of periodic jobs (settings_periodic).

Which schedules a worker declares comes from ``LQ_TEST_PERIODIC`` (names, comma separated),
so a test can start workers whose code declares a schedule and workers whose code no longer
does. Each tick's delivery is recorded in testapp_delivery with its scheduled time.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta

from django.db import connection

from django_lonnymq import Message, handler, periodic

QUEUE = "t_periodic"
WANTED = {name for name in os.environ.get("LQ_TEST_PERIODIC", "").split(",") if name}


@handler(QUEUE)
def record_tick(message: Message) -> None:
    scheduled = message.scheduled_at
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO testapp_delivery (message_id, queue, channel, attempt, event, pid, payload)"
            " VALUES (%s, %s, %s, %s, 'tick', %s, %s::jsonb)",
            [
                message.id,
                message.queue,
                message.channel,
                message.attempt,
                os.getpid(),
                json.dumps(
                    {
                        "payload": message.payload,
                        "dedup_key": message.dedup_key,
                        "scheduled_ms": None if scheduled is None else int(scheduled.timestamp() * 1000),
                    }
                ),
            ],
        )


def declare(name: str, **options: object) -> None:
    if name in WANTED:
        periodic(name=name, queue=QUEUE, channel=name, payload={"schedule": name}, **options)(record_tick)


declare("every2s", every=timedelta(seconds=2))
declare("every2s_catch_up", every=timedelta(seconds=2), catch_up=100)
declare("every1s", every=timedelta(seconds=1))
