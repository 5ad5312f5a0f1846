"""The queue-limits pages (a queue-wide concurrency cap and rate, and the pause).

Rates are edited in human units ("100 / min, burst 20", :class:`.common.RateField`); every
write goes through :func:`django_lonnymq.api.configure_queue`, never an ORM save. The actions
"Pause the selected queues" / "Resume the selected queues" call
:func:`django_lonnymq.api.pause_queue` / :func:`~django_lonnymq.api.resume_queue` per row.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import api
from ..models import QueueConfig
from .common import (
    DatabaseAdmin,
    RateField,
    now_ms,
    queue_write_database,
    rate_text,
    when,
    write_database,
)


class QueueConfigForm(forms.ModelForm):
    rate = RateField()

    class Meta:
        model = QueueConfig
        fields = ["queue", "max_concurrency"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["rate"] = self.instance.rate
        if "max_concurrency" in self.fields:
            self.fields["max_concurrency"].widget.attrs["min"] = 1

    def clean_max_concurrency(self) -> int | None:
        value = self.cleaned_data.get("max_concurrency")
        if value is not None and value < 1:
            raise forms.ValidationError("Max concurrency must be at least 1, or empty for no cap.")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        if data.get("max_concurrency") is None and data.get("rate") is None and not self.errors:
            raise forms.ValidationError(
                "Set a concurrency cap or a rate (delete the row to remove the queue's limits)."
            )
        return data


@admin.register(QueueConfig)
class QueueConfigAdmin(DatabaseAdmin):
    form = QueueConfigForm
    list_display = ("queue", "paused", "cap", "rate_display", "in_flight_now", "next_token")
    list_filter = ("paused",)
    readonly_fields = ("paused", "in_flight_now", "next_token", "updated_at")
    actions = ("pause_queues", "resume_queues")
    search_fields = ("queue",)
    show_facets = admin.ShowFacets.NEVER

    @admin.display(description="max concurrency")
    def cap(self, obj: QueueConfig) -> str:
        return "-" if obj.max_concurrency is None else f"{obj.max_concurrency:,}"

    @admin.display(description="rate")
    def rate_display(self, obj: QueueConfig) -> str:
        return rate_text(obj.rate_count, obj.rate_period_ms, obj.rate_burst)

    @admin.display(description="in flight")
    def in_flight_now(self, obj: QueueConfig) -> str:
        if obj.max_concurrency is None:
            return "- (no cap)"
        return f"{obj.in_flight:,} / {obj.max_concurrency:,}"

    @admin.display(description="next token")
    def next_token(self, obj: QueueConfig) -> str:
        """When the next token is due, only while one is owed ("-": a full bucket, or no rate)."""
        if obj.rate_count is None or obj.next_token_at is None or obj.next_token_at <= now_ms():
            return "-"
        return when(obj.next_token_at)

    def get_readonly_fields(self, request: HttpRequest, obj: QueueConfig | None = None) -> Any:
        return self.readonly_fields if obj is None else ("queue", *self.readonly_fields)

    def save_model(self, request: HttpRequest, obj: QueueConfig, form: forms.ModelForm, change: bool) -> None:
        """Through ``api.configure_queue``, with only what changed (a concurrent edit of the
        other limit is kept)."""
        fields = set(form.changed_data) if change else {"max_concurrency", "rate"}
        changes: dict[str, Any] = {}
        if "max_concurrency" in fields:
            changes["max_concurrency"] = form.cleaned_data["max_concurrency"]
        if "rate" in fields:
            changes["rate"] = form.cleaned_data["rate"]
        if change and not changes:
            return
        using = queue_write_database(obj.queue, QueueConfig)
        api.configure_queue(obj.queue, using=using, **changes)
        obj.refresh_from_db(using=using)
        obj._state.adding = False

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass

    def delete_model(self, request: HttpRequest, obj: QueueConfig) -> None:
        api.configure_queue(
            obj.queue, max_concurrency=None, rate=None, using=queue_write_database(obj.queue, QueueConfig)
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[QueueConfig]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    # -- actions -------------------------------------------------------------------------------

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[QueueConfig], paused: bool) -> None:
        """``api.pause_queue`` / ``api.resume_queue`` per selected queue; says which changed."""
        using = write_database(request, queryset)
        change = api.pause_queue if paused else api.resume_queue
        changed: list[str] = []
        unchanged: list[str] = []
        for obj in queryset.order_by("queue"):
            if change(obj.queue, using=using):
                changed.append(obj.queue)
                self.log_change(request, obj, "Paused the queue" if paused else "Resumed the queue")
            else:
                unchanged.append(obj.queue)
        verb, state = ("Paused", "paused") if paused else ("Resumed", "running")
        parts = []
        if changed:
            parts.append(
                f"{verb} {len(changed)} queue{'s' if len(changed) != 1 else ''}: {', '.join(changed)}."
            )
        if unchanged:
            parts.append(f"Already {state}: {', '.join(unchanged)}.")
        level = messages.SUCCESS if changed else messages.WARNING
        self.message_user(request, " ".join(parts) or "No queue selected.", level)

    @admin.action(
        description="Pause the selected queues (workers take nothing; running work finishes)",
        permissions=["change"],
    )
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[QueueConfig]) -> None:
        self._set_paused(request, queryset, True)

    @admin.action(description="Resume the selected queues", permissions=["change"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[QueueConfig]) -> None:
        self._set_paused(request, queryset, False)
