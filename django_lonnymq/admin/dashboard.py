"""The dashboard page (``admin/django_lonnymq/channel/dashboard/``, routed by the channel
admin): every queue's figures now, and the chosen queue's history, rates and charts.

The figures come from ``QueueSample.live()`` (exact, one SQL function call for all queues)
and the history from ``lonnymq_queue_sample`` rows (recorded by the workers, or by
``manage.py lonnymq_stats --record``). See docs/admin.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import router
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from .. import alarms
from ..conf import settings
from ..figures import (
    RATE_WINDOW,
    format_age,
    format_rate,
    format_throughput,
    net_drain_per_minute,
    throughput,
)
from ..models import Channel, DeadMessage, QueueSample
from ..urlparams import storable
from .charts import backlog_chart, drain_chart, thin, throughput_chart

# Dashboard windows (minutes) and the default one.
WINDOWS = [(15, "15 minutes"), (60, "1 hour"), (360, "6 hours"), (1440, "24 hours")]
DEFAULT_WINDOW = 60


def view(model_admin: admin.ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """The page, for users who may view channels (``model_admin`` is the channel admin)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    context = {
        **model_admin.admin_site.each_context(request),
        **dashboard_context(request, using=router.db_for_read(Channel)),
        "opts": model_admin.opts,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/django_lonnymq/channel/dashboard.html", context)


def dashboard_context(request: HttpRequest, *, using: str | None = None) -> dict[str, Any]:
    """Figures of every queue, and history, rates and charts of the chosen one."""
    alias = using or settings.DATABASE
    live = QueueSample.live(using=alias)
    names = [sample.queue for sample in live]
    asked = request.GET.get("queue")
    selected = (storable(asked) or "") if asked else (names[0] if names else "")
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
    return {
        "title": f"Queue dashboard: {selected}" if selected else "Queue dashboard",
        "subtitle": None,
        "queues": [
            {
                "sample": sample,
                "oldest": format_age(sample.oldest_ready_seconds),
                "selected": sample.queue == selected,
            }
            for sample in live
        ],
        "selected": selected,
        "current": current,
        "alarms": alarms.current(alias, live),
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
        "now": now,
    }
