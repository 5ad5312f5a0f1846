"""The channel pages: the list with each channel's counts and editable limits, the add and
change pages, pause, resume, purge and delete; and the dashboard's URL (the view is
:mod:`.dashboard`).

Every write goes through :mod:`django_lonnymq.api` (one SQL function call each), never an
ORM ``save()``/``update()``/``delete()`` of the queue's tables: the functions keep the
scheduler's invariants.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.translation import ngettext

from .. import api, bounds, statements
from ..conf import settings
from ..models import Channel, Message
from ..models.channel import at_cap
from . import dashboard
from .common import (
    COUNT_CAP,
    DatabaseAdmin,
    EstimatedCountPaginator,
    NoBulkDelete,
    RateField,
    count_text,
    has_perm,
    now_ms,
    queue_write_database,
    rate_text,
    when,
    write_database,
)

# Where a channel instance carries its counts on the changelist and change pages.
COUNTS_ATTR = "lq_counts"


def _waiting(channel: Channel, n: int | None) -> str:
    """A count of waiting messages; a paused channel's are paused, not ready or scheduled."""
    return f"paused ({count_text(n)})" if channel.paused and n else count_text(n)


@dataclass(frozen=True)
class ChannelCounts:
    ready: int
    scheduled: int
    in_flight: int


def channel_counts(ids: list[int], using: str) -> dict[int, ChannelCounts]:
    """Counts of a page of channels in one query: ready and scheduled exact up to COUNT_CAP
    (bounded ranges of the ready index), in flight from the lease index (see the SQL)."""
    if not ids:
        return {}
    rows = statements.channel_counts(ids=ids, cap=COUNT_CAP, on=using)
    return {row[0]: ChannelCounts(*row[1:]) for row in rows}


# ---------------------------------------------------------------------------------------
# Channels
# ---------------------------------------------------------------------------------------


class ChannelChangeList(ChangeList):
    """Fetches the counts of the page's channels in one grouped query, after pagination.

    The page's instances are the ones the template and the list-editable formset render (the
    page queryset's result cache), so the counts ride on them.
    """

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        counts = channel_counts([row.pk for row in rows], self.result_list.db)
        for row in rows:
            setattr(row, COUNTS_ATTR, counts.get(row.pk))


# What configure_channel and the schema accept (bounds.MAX_INTERVAL: 366 days).
MAX_RELEASE_INTERVAL_MS = bounds.MAX_INTERVAL // timedelta(milliseconds=1)


class ChannelForm(forms.ModelForm):
    """Add and change pages; the limits are then saved through ``api.configure_channel``."""

    rate = RateField()
    inherit = forms.MultipleChoiceField(
        choices=[(limit, limit.replace("_", " ")) for limit in api.PLAN_LIMITS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Follow the plan again for",
        help_text="These limits stop being the channel's own: they take the plan's value (or the "
        "default, without a plan). A limit edited above becomes the channel's own.",
    )

    class Meta:
        model = Channel
        fields = [
            "queue",
            "name",
            "plan",
            "max_concurrency",
            "release_interval_ms",
            "paused",
            "weight",
            "ordered",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None and "rate" in self.fields:
            self.initial["rate"] = self.instance.rate
        if "weight" in self.fields:
            self.fields["weight"].required = False
        if "plan" in self.fields:
            self.fields["plan"].help_text = (
                "The plan whose limits the channel follows, except those it sets itself. Empty: "
                "the defaults (for a new channel: its queue's default plan, if it has one)."
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        edited = {"release_interval_ms": "release_interval"}
        both = [
            limit
            for limit in data.get("inherit") or ()
            if any(edited.get(field, field) == limit for field in self.changed_data)
        ]
        if both:
            raise forms.ValidationError(
                f"Edit a limit or let it follow the plan, not both: {', '.join(both)}."
            )
        return data

    def clean_weight(self) -> int:
        value = self.cleaned_data["weight"]
        if value is None:  # left out: unchanged (1 for a new channel)
            return self.instance.weight or 1
        if not 1 <= value <= 1000:
            raise forms.ValidationError("Weight must be between 1 and 1000.")
        return value

    def clean_release_interval_ms(self) -> int:
        value = self.cleaned_data["release_interval_ms"]
        if value is not None and value > MAX_RELEASE_INTERVAL_MS:
            raise forms.ValidationError(
                f"Release interval must be at most 366 days ({MAX_RELEASE_INTERVAL_MS} ms)."
            )
        return value


class ChannelListForm(ChannelForm):
    """The limits edited in the list: same rules, narrow inputs."""

    rate = None  # type: ignore[assignment]  # edited on the change page

    inherit = None  # type: ignore[assignment]  # edited on the change page

    class Meta(ChannelForm.Meta):
        fields = ["max_concurrency", "release_interval_ms", "weight"]
        widgets = {
            "max_concurrency": forms.NumberInput(attrs={"style": "width: 6em", "min": 1}),
            "release_interval_ms": forms.NumberInput(attrs={"style": "width: 8em", "min": 0}),
            "weight": forms.NumberInput(attrs={"style": "width: 5em", "min": 1, "max": 1000}),
        }


@admin.register(Channel)
class ChannelAdmin(NoBulkDelete, DatabaseAdmin):
    form = ChannelForm
    # Fits 1366 px beside the admin's sidebar: the rate, the last release and the creation
    # time are on the change page; a paused channel says so in its name's cell.
    list_display = (
        "channel_display",
        "max_concurrency",
        "release_interval_ms",
        "weight",
        "in_flight_count",
        "waiting_count",
        "next_release",
        "links",
    )
    list_display_links = ("channel_display",)
    list_editable = ("max_concurrency", "release_interval_ms", "weight")
    list_filter = ("queue", "paused", "ordered", "plan")
    search_fields = ("name",)
    list_per_page = 50
    # No COUNT(*) over the channel table: topics make a channel of every key, so it can hold
    # millions of rows. The planner's estimate for the whole list, a count capped at
    # COUNT_CAP for a filtered one (pagination.html says which).
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ("pause", "resume", "skip_blocking", "purge_messages")
    readonly_fields = (
        "in_flight_count",
        "slots_taken",
        "ready_count",
        "scheduled_count",
        "next_release",
        "last_release",
        "created_at",
        "links",
        "limits_in_effect",
    )

    # -- counts ---------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ChannelChangeList

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> type[forms.ModelForm]:
        return super().get_changelist_form(request, form=ChannelListForm, **kwargs)

    def _counts(self, obj: Channel) -> ChannelCounts | None:
        if not hasattr(obj, COUNTS_ATTR):  # the change page: one channel
            setattr(
                obj, COUNTS_ATTR, channel_counts([obj.pk], obj._state.db or settings.DATABASE).get(obj.pk)
            )
        counts: ChannelCounts | None = getattr(obj, COUNTS_ATTR)
        return counts

    @admin.display(description="channel", ordering="queue")
    def channel_display(self, obj: Channel) -> str:
        marks = [m for m, on in (("paused", obj.paused), ("ordered", obj.ordered)) if on]
        if obj.blocked_by is not None:
            marks.append(f"blocked by dead message {obj.blocked_by}")
        return f"{obj} ({', '.join(marks)})" if marks else str(obj)  # queue/name

    @admin.display(description="in flight")
    def in_flight_count(self, obj: Channel) -> str:
        counts = self._counts(obj)
        if counts is None:
            return "-"
        if obj.max_concurrency is not None:
            return f"{counts.in_flight:,} / {obj.max_concurrency:,}"
        return f"{counts.in_flight:,}"

    @admin.display(description="rate")
    def rate_display(self, obj: Channel) -> str:
        return rate_text(obj.rate_count, obj.rate_period_ms, obj.rate_burst)

    @admin.display(description="slots taken")
    def slots_taken(self, obj: Channel) -> str:
        return f"{obj.in_flight:,}" if obj.max_concurrency is not None else "- (no limit)"

    @admin.display(description="ready")
    def ready_count(self, obj: Channel) -> str:
        counts = self._counts(obj)
        return _waiting(obj, counts.ready if counts else None)

    @admin.display(description="ready / scheduled")
    def waiting_count(self, obj: Channel) -> str:
        counts = self._counts(obj)
        if counts is None:
            return "-"
        if obj.paused:
            return _waiting(obj, counts.ready + counts.scheduled)
        return f"{count_text(counts.ready)} / {count_text(counts.scheduled)}"

    @admin.display(description="scheduled")
    def scheduled_count(self, obj: Channel) -> str:
        counts = self._counts(obj)
        return _waiting(obj, counts.scheduled if counts else None)

    @admin.display(description="next release", ordering="next_dequeue_at")
    def next_release(self, obj: Channel) -> str:
        """When the channel releases next: a time, "now" (ready, waiting for a worker), or why
        not ("-": nothing due; paused; at its cap)."""
        counts = self._counts(obj)
        ready = counts.ready if counts else 0
        if obj.paused:
            return "- (paused)"
        if obj.blocked_by is not None:
            return f"- (ordered: blocked by dead message {obj.blocked_by}; requeue or skip it)"
        if obj.hold_until is not None and obj.hold_until > now_ms():
            return f"{when(obj.hold_until)} (ordered: its first message waits for its retry)"
        if ready and obj.max_concurrency is not None and obj.in_flight >= obj.max_concurrency:
            return "when a slot frees (at its cap)"
        if ready and at_cap(obj.in_flight, obj.head_slots, obj.max_concurrency):
            return f"when {min(obj.head_slots, obj.max_concurrency or 1)} slots are free (its next message takes {obj.head_slots})"
        if obj.next_dequeue_at is not None and obj.next_dequeue_at > now_ms():
            return when(obj.next_dequeue_at)  # a rate limit's turn, or a scheduled message
        return "now: waiting for a worker" if ready else "-"

    @admin.display(description="limits in effect")
    def limits_in_effect(self, obj: Channel) -> str:
        """Each limit a plan can give: its value and where it comes from (own, plan, default)."""
        rows = format_html_join(
            "",
            '<tr><th scope="row">{}</th><td>{}</td><td class="lq-source-{}">{}</td></tr>',
            (
                (limit.replace("_", " "), value, source.split(" ")[0], source)
                for limit, value, source in obj.limit_sources()
            ),
        )
        return format_html(
            '<table class="lq-limit-sources"><thead><tr><th>limit</th><th>in effect</th>'
            "<th>from</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        )

    @admin.display(description="last release", ordering="last_dequeue_at")
    def last_release(self, obj: Channel) -> str:
        return when(obj.last_dequeue_at)

    @admin.display(description="messages")
    def links(self, obj: Channel) -> str:
        messages_url = (
            reverse("admin:django_lonnymq_message_changelist") + "?" + urlencode({"channel": obj.pk})
        )
        dead_url = (
            reverse("admin:django_lonnymq_deadmessage_changelist")
            + "?"
            + urlencode({"queue": obj.queue, "channel_name": obj.name})
        )
        return format_html('<a href="{}">messages</a> · <a href="{}">dead</a>', messages_url, dead_url)

    # -- forms: add and change go through configure_channel ----------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Channel | None = None) -> Any:
        limits = ("plan", "max_concurrency", "release_interval_ms", "weight", "rate", "paused", "ordered")
        if obj is None:
            return [(None, {"fields": ("queue", "name", *limits)})]
        return [
            (None, {"fields": ("queue", "name", "links")}),
            (
                "Limits",
                {
                    "fields": (*limits, "inherit", "limits_in_effect"),
                    "description": "Changes take effect on the next dequeue. A limit edited here is "
                    "the channel's own and overrides its plan's.",
                },
            ),
            (
                "Now",
                {
                    "fields": (
                        "in_flight_count",
                        "slots_taken",
                        "ready_count",
                        "scheduled_count",
                        "next_release",
                        "last_release",
                        "created_at",
                    )
                },
            ),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Channel | None = None) -> Any:
        if obj is None:
            return ()
        # A channel is named by (queue, name) everywhere: renaming it is not an operation.
        return ("queue", "name", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: Channel, form: forms.ModelForm, change: bool) -> None:
        """Create or reconfigure through ``api.configure_channel``; only changed limits are
        passed, so a concurrent change of another limit (or a pause) is not overwritten."""
        fields = set(form.changed_data)
        if not change:
            # A new channel: the limits typed in are its own; the others come from its plan.
            fields |= {"paused"}
        changes: dict[str, Any] = {}
        if "plan" in fields:
            changes["plan"] = obj.plan.name if obj.plan is not None else None
        if form.cleaned_data.get("inherit"):
            changes["inherit"] = list(form.cleaned_data["inherit"])
        if "max_concurrency" in fields:
            changes["max_concurrency"] = obj.max_concurrency
        if "release_interval_ms" in fields:
            changes["release_interval"] = timedelta(milliseconds=obj.release_interval_ms)
        if "paused" in fields:
            changes["paused"] = obj.paused
        if "weight" in fields:
            changes["weight"] = obj.weight
        if "ordered" in fields:
            changes["ordered"] = obj.ordered
        if "rate" in fields and "rate" in form.cleaned_data:
            changes["rate"] = form.cleaned_data["rate"]
        if change and not changes:
            return
        using = queue_write_database(obj.queue, Channel)
        obj.pk = api.configure_channel(obj.queue, obj.name, using=using, **changes)
        obj.refresh_from_db(using=using)
        obj._state.adding = False

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # a channel has no related objects to save, and form.save_m2m() would save nothing

    # -- delete: only empty channels, through the SQL function -----------------------------------

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        to_delete, protected = [], []
        for channel in objs:
            to_delete.append(str(channel))
            if self._has_messages(channel):
                protected.append(f"messages of {channel} (purge them, or wait until they are done)")
        perms_needed: set[str] = set()
        if not self.has_delete_permission(request):
            perms_needed.add(str(Channel._meta.verbose_name))
        return to_delete, {str(Channel._meta.verbose_name_plural): len(to_delete)}, perms_needed, protected

    @staticmethod
    def _has_messages(channel: Channel) -> bool:
        # Two probes, one per partial index; "channel_id = x" alone has no index to use.
        messages_of = Message.objects.using(channel._state.db).filter(channel_id=channel.pk)
        return (
            messages_of.filter(lease_until__isnull=True).exists()
            or messages_of.filter(lease_until__isnull=False).exists()
        )

    def delete_model(self, request: HttpRequest, obj: Channel) -> None:
        outcome = api.delete_channel(obj.pk, using=obj._state.db or write_database(request, Channel))
        if outcome not in ("deleted", "missing"):
            # The delete view runs in a transaction: raising rolls back its log entry too.
            raise PermissionDenied(f"channel {obj} was not deleted: {outcome.replace('_', ' ')}")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        for channel in queryset:
            self.delete_model(request, channel)

    # -- actions -------------------------------------------------------------------------------

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return self.has_change_permission(request) and has_perm(request, Message, "delete")

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Channel], paused: bool) -> None:
        using = write_database(request, queryset)
        done = 0
        for channel in queryset.order_by("pk"):
            api.configure_channel(channel.queue, channel.name, paused=paused, using=using)
            self.log_change(request, channel, "Paused" if paused else "Resumed")
            done += 1
        verb = "Paused" if paused else "Resumed"
        self.message_user(request, f"{verb} {done} channel{'s' if done != 1 else ''}.", messages.SUCCESS)

    @admin.action(
        description="Pause selected channels (release nothing; running work finishes)", permissions=["change"]
    )
    def pause(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        self._set_paused(request, queryset, True)

    @admin.action(description="Resume selected channels", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        self._set_paused(request, queryset, False)

    @admin.action(
        description="Skip the dead message that blocks selected ordered channels", permissions=["change"]
    )
    def skip_blocking(self, request: HttpRequest, queryset: QuerySet[Channel]) -> None:
        """An ordered channel blocked by a dead message goes on with the messages after it (the
        dead one stays in the dead letters, where it can still be requeued)."""
        using = write_database(request, queryset)
        skipped = []
        for channel in queryset.order_by("pk"):
            message_id = api.unblock_channel(channel.queue, channel.name, using=using)
            if message_id is not None:
                self.log_change(request, channel, f"Skipped dead message {message_id}")
                skipped.append(f"{channel} (message {message_id})")
        if skipped:
            self.message_user(request, f"Unblocked {len(skipped)}: {', '.join(skipped)}.", messages.SUCCESS)
        else:
            self.message_user(request, "None of the selected channels was blocked.", messages.WARNING)

    @admin.action(description="Purge waiting messages of selected channels…", permissions=["purge"])
    def purge_messages(self, request: HttpRequest, queryset: QuerySet[Channel]) -> HttpResponse | None:
        """Deletes every ready and scheduled message (not those in flight) after a confirmation page."""
        channels = list(queryset.order_by("queue", "name"))
        using = write_database(request, queryset)
        if request.POST.get("post") == "yes":
            purged = 0
            for channel in channels:
                n = api.purge_channel(channel.pk, using=using)
                self.log_change(request, channel, f"Purged {n} waiting {ngettext('message', 'messages', n)}")
                purged += n
            self.message_user(
                request,
                f"Purged {purged:,} waiting {ngettext('message', 'messages', purged)} from {len(channels)} "
                f"{ngettext('channel', 'channels', len(channels))}.",
                messages.SUCCESS,
            )
            return None
        counts = channel_counts([c.pk for c in channels], using)
        rows = []
        for channel in channels:
            c = counts.get(channel.pk)
            rows.append(
                (
                    channel,
                    *(count_text(getattr(c, f) if c else None) for f in ("ready", "scheduled", "in_flight")),
                )
            )
        context = {
            **self.admin_site.each_context(request),
            "title": "Purge waiting messages?",
            "subtitle": None,
            "rows": rows,
            "queryset": queryset,
            "opts": self.opts,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "action_name": "purge_messages",
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/django_lonnymq/channel/purge_confirmation.html", context)

    # -- the dashboard ---------------------------------------------------------------------------

    def get_urls(self) -> list[Any]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_dashboard"
        return [
            path("dashboard/", self.admin_site.admin_view(self.dashboard_view), name=name),
            *super().get_urls(),
        ]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        return dashboard.view(self, request)
