"""Handlers of the example project: they simulate work of very different sizes."""

import os
import time
from datetime import timedelta

from django.utils import timezone

from django_lonnymq import Message, handler, periodic, subscribe

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


@handler("ingest")
def ingest(message: Message) -> None:
    """Pretend to ingest one uploaded file (a row of the Spark step's data set), then record it.

    The payload is the row as JSON (``file_id``, ``kind``, ``size_bytes``, ``uploaded_at``);
    the channel is the tenant. No simulated work: the Spark step drains 20,000 of these and
    shows the order they finish in. Recorded like ``transcode``, before the worker acks.
    """
    started_at = timezone.now()
    JobRun.objects.create(
        queue="ingest",
        message_id=message.id,
        tenant=message.channel,
        seconds=0.0,
        attempt=message.attempt,
        worker_pid=os.getpid(),
        started_at=started_at,
        finished_at=timezone.now(),
    )


@handler("reindex")
def reindex(message: Message) -> None:
    """Pretend to re-index a document (the debounce step, example_project/debounce_demo.py):
    record which revision the run saw."""
    started_at = timezone.now()
    JobRun.objects.create(
        queue="reindex",
        message_id=message.id,
        tenant=f"document {message.payload['document']} revision {message.payload['revision']}",
        seconds=0.0,
        attempt=message.attempt,
        worker_pid=os.getpid(),
        started_at=started_at,
        finished_at=timezone.now(),
    )


@periodic(
    every=timedelta(seconds=2), queue="reports", name="demo-progress-report", payload={"of": "transcode"}
)
@handler("reports")
def progress_report(message: Message) -> None:
    """A periodic report: every 2 s, count the jobs of a queue done so far (one row per tick).

    ``seconds`` records how long after its scheduled time the tick ran.
    """
    started_at = timezone.now()
    done = JobRun.objects.filter(queue=message.payload["of"]).count()
    scheduled = message.scheduled_at or started_at
    JobRun.objects.create(
        queue="reports",
        message_id=message.id,
        tenant=f"{scheduled:%H:%M:%S} {done} done",
        seconds=(started_at - scheduled).total_seconds(),
        attempt=message.attempt,
        worker_pid=os.getpid(),
        started_at=started_at,
        finished_at=timezone.now(),
    )


# Topics: one event type, two consumer groups (example_project/topics_demo.py publishes it).
subscribe("video.uploaded", queue="thumbnails")
subscribe("video.uploaded", queue="notify")


def _record(message: Message, queue: str | None = None) -> None:
    """A scoreboard row for a message the demo's steps count (``queue``: a label of its own)."""
    started_at = timezone.now()
    JobRun.objects.create(
        queue=queue or message.queue,
        message_id=message.id,
        tenant=message.channel,
        seconds=0.0,
        attempt=message.attempt,
        worker_pid=os.getpid(),
        started_at=started_at,
        finished_at=timezone.now(),
    )


@handler("thumbnails")
def thumbnails(message: Message) -> None:
    """Group one of ``video.uploaded``: pretend to render the video's thumbnails."""
    _record(message)


@handler("notify")
def notify(message: Message) -> None:
    """Group two of ``video.uploaded``: pretend to tell the tenant's followers."""
    _record(message)


# -- the demo's workflow step (example_project/workflows_demo.py) ------------------------


@handler("wf_fetch")
def workflow_fetch(message: Message) -> dict[str, int]:
    """A workflow's first step: "fetch" a file of ``rows`` rows; its output is the row count."""
    _record(message)
    return {"rows": int(message.payload["rows"])}


@handler("wf_parse")
def workflow_parse(message: Message) -> dict[str, int]:
    """Parse one part of the fetched file (a fan-out step): reads the fetch step's output."""
    _record(message)
    rows = message.parent_outputs["fetch"]["rows"]
    part, parts = int(message.payload["part"]), int(message.payload["parts"])
    return {"rows": len(range(part, rows, parts))}


@handler("wf_merge")
def workflow_merge(message: Message) -> dict[str, int]:
    """The fan-in: runs once, after every part, and adds up their outputs."""
    _record(message)
    return {"rows": sum(output["rows"] for output in message.parent_outputs.values())}


# -- the demo's durable step (example_project/durable_demo.py) -------------------------


@handler("checkout")
def checkout(message: Message) -> None:
    """A durable handler: charge once (its row commits with the step's checkpoint), wait a
    second without a thread (a durable sleep), wait for the tenant's approval event, then
    provision once. A crash or a restart between them never charges twice."""
    message.step("charge", _record_step, message, "charge")
    message.sleep("cool-off", 1)
    approval = message.wait("approval", f"demo-approval-{message.channel}", timeout=60)
    if approval is None:
        raise RuntimeError(f"{message.channel}'s approval did not come within 60 s")
    message.step("provision", _record_step, message, "provision")


def _record_step(message: Message, step: str) -> str:
    _record(message, queue=f"checkout:{step}")
    return step
