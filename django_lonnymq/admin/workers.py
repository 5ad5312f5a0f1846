"""The worker pages (read-only; rows are written by the workers' heartbeats). A message's
``leased_by`` links here (:func:`.common.leased_by_link`).

A worker's state is judged on the database's clock: ``stopped`` (graceful shutdown),
``lost`` (silent longer than ``LONNYMQ_WORKER_LOST_AFTER``) or ``live``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import F, QuerySet
from django.db.models.expressions import Combinable
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from ..models import Worker
from ..models.worker import with_state
from .common import DatabaseAdmin, when

STATES = (("live", "live"), ("lost", "lost"), ("stopped", "stopped"))


class WorkerStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> tuple[tuple[str, str], ...]:
        return STATES

    def queryset(self, request: HttpRequest, queryset: QuerySet[Worker]) -> QuerySet[Worker]:
        value = self.value()
        if value in dict(STATES):
            return queryset.filter(lq_state=value)  # type: ignore[misc]  # annotated by with_state
        return queryset


@admin.register(Worker)
class WorkerAdmin(DatabaseAdmin):
    # Host, pid, start and stop times are on the worker's page: the list fits 1366 px.
    list_display = (
        "name",
        "state_display",
        "queues_display",
        "in_flight_of",
        "leases_now",
        "done_failed",
        "last_heartbeat",
    )
    list_filter = (WorkerStateFilter,)
    search_fields = ("name", "host")
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    fields = (
        "name",
        "state_display",
        "host",
        "pid",
        "instance",
        "queues_display",
        "concurrency",
        "in_flight",
        "leases_now",
        "processed",
        "failed",
        "started_at",
        "heartbeat_at",
        "stopped_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        return with_state(super().get_queryset(request))

    def get_ordering(self, request: HttpRequest) -> list[str | Combinable]:
        return [F("stopped_at").desc(nulls_first=True), F("heartbeat_at").desc(), "name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # rows are the workers' own; any worker prunes old ones

    @admin.display(description="state", ordering="lq_state")
    def state_display(self, obj: Worker) -> str:
        return getattr(obj, "lq_state", None) or obj.state

    @admin.display(description="queues")
    def queues_display(self, obj: Worker) -> str:
        return ", ".join(obj.queues)

    @admin.display(description="processed / failed")
    def done_failed(self, obj: Worker) -> str:
        return f"{obj.processed:,} / {obj.failed:,}"

    @admin.display(description="last heartbeat", ordering="heartbeat_at")
    def last_heartbeat(self, obj: Worker) -> str:
        return when(obj.heartbeat_at)

    @admin.display(description="in flight / threads")
    def in_flight_of(self, obj: Worker) -> str:
        """ "full" when it holds as many handler calls as threads (a batch is one call): it fetches
        no more until one ends."""
        full = obj.in_flight >= obj.concurrency and (getattr(obj, "lq_state", None) or obj.state) == "live"
        return f"{obj.in_flight:,} / {obj.concurrency:,}" + (" (full)" if full else "")

    @admin.display(description="leases held now", ordering="lq_leases")
    def leases_now(self, obj: Worker) -> Any:
        count = getattr(obj, "lq_leases", 0)
        if not count:
            return 0
        url = reverse("admin:django_lonnymq_message_changelist") + "?" + urlencode({"leased_by": obj.name})
        return format_html('<a href="{}">{}</a>', url, count)
