"""The message pages (read only): the list with its queue, channel and state filters, the
detail page with a durable handler's checkpoints, and the run-now and cancel actions, "resume
now" and "run again from step X" (each through :mod:`django_lonnymq.api`).

Counts never scan a large table (:class:`.common.EstimatedCountPaginator`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect

from .. import api, durable
from ..exceptions import LonnyMQError
from ..models import Channel, Message
from ..progress import message_status
from ..urlparams import an_id, storable
from .common import (
    CHANNEL_FILTER_LIMIT,
    QueueFilter,
    ReadOnlyQueueAdmin,
    batches,
    button_urls,
    has_perm,
    in_channels,
    leased_by_link,
    read_database,
    refused_post,
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

    # -- a durable handler's checkpoints, and its two buttons (POST, change permission) -----

    def get_urls(self) -> list[Any]:
        buttons = [("resume", self.resume_view), ("run-again", self.run_again_view)]
        return [*button_urls(self, buttons), *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        message_id = an_id(unquote(object_id))
        found = (
            []
            if message_id is None
            else durable.checkpoints(message_id, using=write_database(request, Message))
        )
        shown = [{**c._asdict(), "created": when(c.created_at), "until": when(c.until_ms)} for c in found]
        status = (
            None if message_id is None else message_status(message_id, using=write_database(request, Message))
        )
        pending = durable.suspended_on(found, api.now_ms())
        context = {
            **(extra_context or {}),
            "lq_can_act": self.has_change_permission(request),
            "lq_checkpoints": shown,
            "lq_progress": status.progress if status is not None else None,
            "lq_suspended_on": next((c for c in shown if pending and c["name"] == pending.name), None),
            "lq_query": request.GET.urlencode(),
        }
        return super().change_view(request, object_id, form_url, context)

    def _acted_on(self, request: HttpRequest, object_id: str) -> int | HttpResponse:
        """The message a button posts to, once the method and the permission are right."""
        refused = refused_post(self, request)
        if refused is not None:
            return refused
        message_id = an_id(unquote(object_id))
        if message_id is None:
            raise Http404(f"{object_id!r} is not a message id")
        return message_id

    def _back(self, request: HttpRequest, message_id: int) -> HttpResponseRedirect:
        query = request.GET.urlencode()
        return HttpResponseRedirect(f"../../{message_id}/change/" + (f"?{query}" if query else ""))

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        message_id = self._acted_on(request, object_id)
        if isinstance(message_id, HttpResponse):
            return message_id
        moved = api.resume([message_id], using=write_database(request, Message))
        if moved:
            self.message_user(request, f"Message {message_id} resumed: it runs again now.", messages.SUCCESS)
        else:
            self.message_user(
                request, f"Message {message_id} is not suspended: nothing to resume.", messages.WARNING
            )
        return self._back(request, message_id)

    def run_again_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        message_id = self._acted_on(request, object_id)
        if isinstance(message_id, HttpResponse):
            return message_id
        step = request.POST.get("step", "")
        try:
            forgotten = api.forget_steps(message_id, step, using=write_database(request, Message))
        except LonnyMQError as exc:
            self.message_user(request, f"Not changed: {exc}", messages.ERROR)
            return self._back(request, message_id)
        self.message_user(
            request,
            f"Message {message_id} runs again from step {step!r} at its next run: "
            f"{len(forgotten):,} checkpoint(s) forgotten ({', '.join(forgotten)}).",
            messages.SUCCESS,
        )
        return self._back(request, message_id)
