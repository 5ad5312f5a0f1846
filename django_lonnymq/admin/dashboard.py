"""The dashboard page (``admin/django_lonnymq/channel/dashboard/``, routed by the channel
admin): every queue's figures now, and the chosen queue's history, rates and charts.

The figures come from ``QueueSample.live()`` (one SQL function call for all queues: exact up
to ``LONNYMQ_STATS_COUNT_CAP`` waiting messages per queue, estimated past it and marked ``~``)
and the history from ``lonnymq_queue_sample`` rows (recorded by the workers, or by
``manage.py lonnymq_stats --record``). A user with the change permission on queue limits
(``QueueConfig``) gets a Pause / Resume button per queue (a POST to the same page, which calls
``api.pause_queue`` / ``api.resume_queue``). See docs/admin.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from .. import alarms, api, durable, statements, workflows
from ..conf import settings
from ..exceptions import InvalidArgument
from ..figures import (
    RATE_WINDOW,
    format_age,
    format_rate,
    format_throughput,
    net_drain_per_minute,
    throughput,
)
from ..models import Channel, DeadMessage, QueueConfig, QueueSample
from ..models import worker as workers
from ..models.channel import at_cap as channel_at_cap
from ..progress import running_progress
from ..routing import queue_databases
from ..sampling import count_cap
from ..urlparams import storable
from .charts import backlog_chart, drain_chart, thin, throughput_chart
from .common import (
    COUNT_CAP,
    DATABASE_PARAM,
    count_text,
    has_perm,
    queue_write_database,
    rate_text,
    read_database,
    several_databases,
    when,
)

# Dashboard windows (minutes) and the default one.
WINDOWS = [(15, "15 minutes"), (60, "1 hour"), (360, "6 hours"), (1440, "24 hours")]
DEFAULT_WINDOW = 60
# Channels in the tenants view.
TENANTS = 20
# The dashboard's list of running messages with a progress report.
PROGRESS_SHOWN = 10
# The tenants view looks up the head of every channel of a queue of at most this many
# channels; past it, of this many next in turn and this many at their cap (queue_tenants).
TENANT_CANDIDATES = 1_000


def view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """The page, for users who may view channels (``model_admin`` is the channel admin)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    if request.method == "POST":
        return pause_or_resume(request)
    context = {
        **model_admin.admin_site.each_context(request),
        **dashboard_context(request, using=read_database(request, Channel)),
        "opts": model_admin.opts,
        "can_pause": may_pause(request),
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/django_lonnymq/channel/dashboard.html", context)


def may_pause(request: HttpRequest) -> bool:
    """Whether the user may pause and resume queues: the change permission on queue limits."""
    return has_perm(request, QueueConfig, "change")


def pause_or_resume(request: HttpRequest) -> HttpResponse:
    """The Pause / Resume buttons: ``queue`` and ``action`` (``pause`` or ``resume``) posted
    (with the CSRF token the admin checks), then back to the page showing that queue."""
    if not may_pause(request):
        raise PermissionDenied
    queue = request.POST.get("queue", "")
    action = request.POST.get("action")
    if action not in ("pause", "resume"):
        raise PermissionDenied
    try:
        using = queue_write_database(queue, QueueConfig)
        if action == "pause":
            changed = api.pause_queue(queue, using=using)
        else:
            changed = api.resume_queue(queue, using=using)
    except InvalidArgument as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(request.path)
    state = "paused" if action == "pause" else "running"
    if changed:
        done = "Paused" if action == "pause" else "Resumed"
        messages.success(request, f"{done} the queue “{queue}”.")
    else:
        messages.warning(request, f"The queue “{queue}” was already {state}.")
    query = {"queue": queue}
    minutes = request.POST.get("minutes")
    if minutes and minutes.isdigit():
        query["minutes"] = minutes
    if several_databases():
        query[DATABASE_PARAM] = queue_write_database(queue, QueueConfig)
    return HttpResponseRedirect(f"{request.path}?{urlencode(query)}")


def dashboard_context(request: HttpRequest, *, using: str | None = None) -> dict[str, Any]:
    """Figures of every queue, and history, rates and charts of the chosen one."""
    alias = using or settings.DATABASE
    live = QueueSample.live(using=alias)
    paused = alarms.paused_queues(alias)
    asked = request.GET.get("queue")
    # Without a choice: the queue with the most ready messages (then the deepest, then by name).
    busiest = sorted(live, key=lambda sample: (-sample.ready, -sample.depth, sample.queue))
    selected = (storable(asked) or "") if asked else (busiest[0].queue if busiest else "")
    try:
        minutes = int(request.GET.get("minutes", DEFAULT_WINDOW))
    except ValueError:
        minutes = DEFAULT_WINDOW
    if minutes not in dict(WINDOWS):
        minutes = DEFAULT_WINDOW
    current = next((sample for sample in live if sample.queue == selected), None)
    now = timezone.now()
    history = list(
        QueueSample.objects.using(alias)
        .filter(queue=selected, at__gte=now - timedelta(minutes=minutes))
        .order_by("at")
    )
    # The live figures are the newest point, so the charts and rates end at "now".
    points = [*history, current] if current is not None and history else history
    drawn = thin(points)
    died_recently = (
        DeadMessage.objects.using(alias).filter(queue=selected, died_at__gte=now - RATE_WINDOW).count()
    )
    rate = net_drain_per_minute(points, since=now - RATE_WINDOW)
    recent = throughput(points, since=now - RATE_WINDOW)
    in_window = throughput(points, since=now - timedelta(minutes=minutes))
    suspended = durable.suspended_counts(using=alias)
    return {
        "title": (
            f"Queue dashboard: {selected}{' (paused)' if selected in paused else ''}"
            if selected
            else "Queue dashboard"
        ),
        "subtitle": None,
        "queues": [
            {
                "sample": sample,
                "oldest": format_age(sample.oldest_ready_seconds),
                "selected": sample.queue == selected,
                "paused": sample.queue in paused,
                "suspended": suspended.get(sample.queue, 0),
            }
            for sample in live
        ],
        "selected": selected,
        "queue_paused": selected in paused,
        "current": current,
        "alarms": alarms.current(alias, live),
        "tenants": tenants(selected, current, using=alias, queue_paused=selected in paused)
        if current
        else [],
        "tenants_limit": TENANTS,
        "oldest_ready": format_age(current.oldest_ready_seconds) if current else "-",
        "net_drain": format_rate(rate),
        "throughput": format_throughput(recent.per_minute if recent else None),
        "released_recently": recent.released if recent else None,
        "released_since": recent.since if recent else None,
        "released_in_window": in_window.released if in_window else None,
        "released_dropped": bool(in_window and in_window.dropped),
        "died_recently": died_recently,
        "rate_minutes": int(RATE_WINDOW.total_seconds() // 60),
        "windows": WINDOWS,
        "minutes": minutes,
        "sample_count": len(history),
        "backlog_chart": backlog_chart(drawn),
        "throughput_chart": throughput_chart(drawn),
        "drain_chart": drain_chart(drawn),
        "workflows": workflows.counts(using=alias),
        "progress": [
            {"id": message_id, "channel": channel, "progress": report}
            for message_id, channel, report in running_progress(selected, limit=PROGRESS_SHOWN, using=alias)
        ]
        if selected
        else [],
        "progress_limit": PROGRESS_SHOWN,
        "count_cap": count_cap(),
        "any_estimated": any(sample.estimated for sample in live),
        "now": now,
        # Several databases hold queues: the page shows one (?database=), with links to the others.
        "databases": queue_databases() if several_databases() else [],
        "database": alias,
    }


def tenants(
    queue: str, current: QueueSample, *, using: str, queue_paused: bool = False
) -> list[dict[str, Any]]:
    """The tenants view: who is waiting, and is everyone getting a turn? At most
    :data:`TENANTS` channels of ``queue``, the longest-waiting ready head first (named
    statement ``queue_tenants``). In a paused queue (``queue_paused``) a channel with work
    waits for the queue's resume, not for a worker."""
    params = {"queue": queue, "limit": TENANTS, "cap": COUNT_CAP, "candidates": TENANT_CANDIDATES}
    rows = statements.queue_tenants(**params, on=using)
    live, full = workers.serving(queue, using=using)
    if not live:
        why_waiting = "ready, waiting for a worker: none is running"
    elif full == live:
        why_waiting = f"ready, waiting for a worker: all {live:,} are full"
    else:
        why_waiting = "ready, waiting for a worker"
    found = []
    for (channel_id, name, paused, max_concurrency, in_flight, weight, interval_ms, rate_count, rate_period_ms,
         rate_burst, next_at, last_at, released, head_at, now_ms, ready, scheduled, head_slots) in rows:  # fmt: skip
        at_cap = channel_at_cap(in_flight, head_slots, max_concurrency)
        waiting = not paused and head_at is not None and head_at <= now_ms
        if paused:
            state = "paused"
        elif queue_paused and head_at is not None:
            state = "waiting: the queue is paused"
        elif at_cap:
            state = "at its cap"
        elif waiting and next_at is not None and next_at > now_ms:
            state = "waiting for its rate limit"
        elif waiting:
            state = why_waiting
        elif head_at is not None:
            state = "scheduled only"
        else:
            state = "nothing waiting"
        limits = [
            f"max {max_concurrency:,}" if max_concurrency is not None else "",
            f"every {interval_ms:,} ms" if interval_ms else "",
            rate_text(rate_count, rate_period_ms, rate_burst) if rate_count else "",
            f"weight {weight}" if weight != 1 else "",
        ]
        share = released / current.released_total if current.released_total else None
        found.append(
            {
                "name": name,
                "url": reverse("admin:django_lonnymq_channel_change", args=[channel_id]),
                "state": state,
                "warn": state in (why_waiting, "at its cap", "waiting for its rate limit"),
                "paused": paused,
                "at_cap": at_cap,
                "ready": count_text(ready) if not paused else f"paused ({count_text(ready + scheduled)})",
                "scheduled": count_text(scheduled),
                "waited": format_age((now_ms - head_at) / 1000) if waiting else "-",
                "in_flight": f"{in_flight:,} / {max_concurrency:,}"
                if max_concurrency is not None
                else f"{in_flight:,}",
                "limits": " · ".join(text for text in limits if text) or "-",
                "released": released,
                "share": "-" if share is None else f"{share:.0%}" if share >= 0.01 or not released else "<1%",
                "next_release": "-" if paused or next_at is None or next_at <= now_ms else when(next_at),
                "last_release": when(last_at),
            }
        )
    return found
