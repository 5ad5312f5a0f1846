"""The message pages (read only): the list with its queue, channel and state filters, the
detail page, and the run-now and cancel actions (each through :mod:`django_lonnymq.api`).

Counts never scan a large table (:class:`.common.EstimatedCountPaginator`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import api
from ..models import Channel, Message
from ..urlparams import an_id, storable
from .common import (
    CHANNEL_FILTER_LIMIT,
    QueueFilter,
    ReadOnlyQueueAdmin,
    batches,
    has_perm,
    in_channels,
    leased_by_link,
    read_database,
    run_in_batches,
    when,
    write_database,
)


class ChannelFilter(admin.SimpleListFilter):
    """Lists the channels of the chosen queue (at most CHANNEL_FILTER_LIMIT); any channel id
    works in the URL (the channel list links here)."""

    title = "channel"
    parameter_name = "channel"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        channels = Channel.objects.using(read_database(request, Channel)).order_by("queue", "name")
        queue = storable(request.GET.get("queue"))
        if queue:
            channels = channels.filter(queue=queue)
        return [(str(c.pk), c.name if queue else str(c)) for c in channels[:CHANNEL_FILTER_LIMIT]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        value = self.value()
        if not value:
            return queryset
        channel_id = an_id(value)
        if channel_id is None:
            raise IncorrectLookupParameters(f"channel must be a channel id, got {value!r}")
        return in_channels(queryset, [channel_id])


class StateFilter(admin.SimpleListFilter):
    """in flight: leased (lease index); paused: waiting in a paused channel; ready: due now
    and scheduled: due later, both in a channel that is not paused (ready index)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("ready", "ready"),
            ("scheduled", "scheduled"),
            ("paused", "paused"),
            ("in_flight", "in flight"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        value, now = self.value(), api.now_ms()
        if value == "in_flight":
            return queryset.filter(lease_until__isnull=False)
        if value == "paused":
            return queryset.filter(lease_until__isnull=True, channel__paused=True)
        if value == "ready":
            return queryset.filter(lease_until__isnull=True, dequeue_at__lte=now, channel__paused=False)
        if value == "scheduled":
            return queryset.filter(lease_until__isnull=True, dequeue_at__gt=now, channel__paused=False)
        return queryset


@admin.register(Message)
class MessageAdmin(ReadOnlyQueueAdmin):
    list_display = (
        "id",
        "channel_display",
        "state_display",
        "due",
        "attempts_display",
        "leased_by_display",
        "error_excerpt",
    )
    list_filter = (QueueFilter, ChannelFilter, StateFilter)
    list_select_related = ("channel",)
    sortable_by = ("id",)
    actions = ("run_now", "cancel")
    fields = (
        "id",
        "channel",
        "state_display",
        "due",
        "priority",
        "attempts_display",
        "snoozes",
        "leased_by_display",
        "lease_expires",
        "lease_token",
        "slot_taken",
        "cancel_requested",
        "dedup_key",
        "enqueued_at",
        "last_error_full",
        "payload_pretty",
    )
    readonly_fields = fields

    @admin.display(description="channel")
    def channel_display(self, obj: Message) -> str:
        return str(obj.channel)  # queue/name

    @admin.display(description="state")
    def state_display(self, obj: Message) -> str:
        return obj.state.replace("_", " ")

    @admin.display(description="leased by")
    def leased_by_display(self, obj: Message) -> str:
        return leased_by_link(obj)

    @admin.display(description="due")
    def due(self, obj: Message) -> str:
        return when(obj.dequeue_at)

    @admin.display(description="lease expires")
    def lease_expires(self, obj: Message) -> str:
        return when(obj.lease_until)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return has_perm(request, Message, "delete")

    @admin.action(description="Run now (make scheduled or backed-off messages ready)", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        using = write_database(request, queryset)
        moved = run_in_batches(queryset, lambda ids: api.run_now(ids, using=using))
        self.message_user(
            request,
            f"{moved:,} messages made ready now (in flight and already due ones are left as they are).",
        )

    @admin.action(description="Cancel (delete waiting messages, stop running ones)", permissions=["cancel"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Message]) -> None:
        using = write_database(request, queryset)
        # missing_ok: a message that finished since the page was shown is no error here.
        rows = [
            row for ids in batches(queryset) for row in api.cancel_rows(ids, missing_ok=True, using=using)
        ]
        running = sum(1 for _, was_running in rows if was_running)
        self.message_user(
            request,
            f"{len(rows) - running:,} waiting messages cancelled; {running:,} running ones will be stopped "
            "by their worker at its next heartbeat and moved to the dead letters (reason: cancelled).",
        )
