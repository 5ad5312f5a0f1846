"""The dead-letter pages (read only): the list with its queue, channel and reason filters, the
detail page, and the requeue and purge actions (each through :mod:`django_lonnymq.api`)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import ngettext

from .. import api
from ..models import Channel, DeadMessage
from ..urlparams import storable
from .common import (
    CHANNEL_FILTER_LIMIT,
    QueueFilter,
    ReadOnlyQueueAdmin,
    has_perm,
    read_database,
    run_in_batches,
    write_database,
)


class DeadQueueFilter(QueueFilter):
    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and storable(value) is None:
            return queryset.none()
        return queryset.filter(queue=value) if value else queryset  # the (queue, died_at) index


class DeadChannelFilter(admin.SimpleListFilter):
    title = "channel"
    parameter_name = "channel_name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        queue = storable(request.GET.get("queue"))
        if not queue:
            return []
        names = (
            Channel.objects.using(read_database(request, Channel))
            .filter(queue=queue)
            .order_by("name")
            .values_list("name", flat=True)
        )
        return [(name, name) for name in names[:CHANNEL_FILTER_LIMIT]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[DeadMessage]) -> QuerySet[DeadMessage]:
        value = self.value()
        if value and storable(value) is None:
            return queryset.none()
        return queryset.filter(channel_name=value) if value else queryset


@admin.register(DeadMessage)
class DeadMessageAdmin(ReadOnlyQueueAdmin):
    list_display = (
        "id",
        "queue",
        "channel_name",
        "reason",
        "attempts_display",
        "died_at",
        "error_excerpt",
    )
    list_filter = (DeadQueueFilter, DeadChannelFilter, "reason")
    sortable_by = ("id", "died_at")
    actions = ("requeue", "requeue_keep_attempts", "purge")
    fields = (
        "id",
        "queue",
        "channel_name",
        "channel",
        "reason",
        "attempts_display",
        "snoozes",
        "priority",
        "dedup_key",
        "enqueued_at",
        "died_at",
        "last_error_full",
        "payload_pretty",
    )
    readonly_fields = fields

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return has_perm(request, DeadMessage, "delete")

    def _requeue(self, request: HttpRequest, queryset: QuerySet[DeadMessage], reset: bool) -> None:
        using = write_database(request, queryset)
        requeued = run_in_batches(
            queryset, lambda ids: api.requeue_dead(ids, reset_attempts=reset, using=using)
        )
        how = (
            ngettext("with its attempts reset", "with their attempts reset", requeued)
            if reset
            else ngettext(
                "keeping its attempts (one more try)", "keeping their attempts (one more try each)", requeued
            )
        )
        self.message_user(
            request,
            f"Requeued {requeued:,} {ngettext('dead message', 'dead messages', requeued)}, {how}.",
            messages.SUCCESS,
        )

    @admin.action(description="Requeue (reset attempts)", permissions=["change"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[DeadMessage]) -> None:
        self._requeue(request, queryset, reset=True)

    @admin.action(description="Requeue, keeping attempts (one more try)", permissions=["change"])
    def requeue_keep_attempts(self, request: HttpRequest, queryset: QuerySet[DeadMessage]) -> None:
        self._requeue(request, queryset, reset=False)

    @admin.action(description="Purge (delete for good)", permissions=["purge"])
    def purge(self, request: HttpRequest, queryset: QuerySet[DeadMessage]) -> None:
        using = write_database(request, queryset)

        def purge_ids(ids: list[int]) -> list[int]:
            return api.purge_dead(ids, using=using)

        purged = run_in_batches(queryset, purge_ids)
        self.message_user(
            request,
            f"Purged {purged:,} {ngettext('dead message', 'dead messages', purged)}.",
            messages.SUCCESS,
        )
