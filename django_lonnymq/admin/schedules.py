"""The schedule pages: list with next and last tick, pause and resume, edit the
timing or the payload, add schedules that live only in the database (one per tenant, say).

Timing changes recompute the next tick at once, so a running worker picks them up at its
next tick check without a restart. A save writes only the fields the form changed, never
the columns the workers write (the last tick, its message). Actions check the change
permission, as the rest of the admin does.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms.fields import InvalidJSONInput
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from .. import arguments, bounds, schedules
from ..exceptions import InvalidArgument
from ..models import Schedule
from .common import DatabaseAdmin, queue_write_database, when

TIMING_FIELDS = ("cron", "every_ms", "timezone")


class PayloadField(forms.JSONField):
    """JSON text checked as an enqueue checks a payload (:func:`arguments.payload`): whatever
    the queue would refuse, or Python's json cannot decode, is an error on the field, and the
    text is shown back as typed."""

    def to_python(self, value: Any) -> Any:
        try:
            decoded = super().to_python(value)
        except RecursionError:  # deeper than Python's json goes (about 1,000 levels)
            raise forms.ValidationError(
                f"payload is nested too deep to decode, more than the {bounds.MAX_PAYLOAD_DEPTH} "
                "levels allowed (the root is level 0)"
            ) from None
        if decoded is not None:
            try:
                arguments.payload(decoded)
            except InvalidArgument as exc:  # PayloadError: too deep, a lone surrogate, NUL, NaN
                raise forms.ValidationError(str(exc)) from None
        return decoded

    def bound_data(self, data: Any, initial: Any) -> Any:
        # As typed: decoding it again may fail the same way, and a decoded lone surrogate
        # cannot be written into the page.
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        return InvalidJSONInput(data)

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return super().has_changed(initial, data)
        except forms.ValidationError:
            return True


class ScheduleForm(forms.ModelForm):
    """The rules of ``@periodic``, checked by the same functions, each error on its field."""

    every_seconds = forms.FloatField(
        required=False,
        min_value=0,
        label="Every (seconds)",
        help_text="A fixed interval instead of a cron expression (at least 1 second).",
    )
    payload = PayloadField(required=False, help_text="JSON, the payload of every tick's message (empty: {}).")

    # The first tick of the timing as cleaned (None when the form has errors).
    first_tick_at: int | None = None

    class Meta:
        model = Schedule
        fields = [
            "name",
            "queue",
            "channel",
            "cron",
            "timezone",
            "payload",
            "catch_up",
            "max_attempts",
            "enabled",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and self.instance.every_ms is not None:
            self.initial.setdefault("every_seconds", self.instance.every_ms / 1000)
        if "payload" in self.fields:
            self.fields["payload"].required = False

    def _check(self, field: str, check: Any, value: Any) -> Any:
        try:
            return check(value)
        except InvalidArgument as exc:
            self.add_error(field, str(exc))
            return None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        for field, limit in (("name", 200), ("queue", 100), ("channel", 200)):
            if data.get(field) is not None and field in self.fields:
                self._check(field, lambda v, f=field, n=limit: arguments.name(f, v, n), data[field])
        cron = (data.get("cron") or "").strip() or None
        seconds = data.get("every_seconds")
        if cron is not None and seconds is not None:
            self.add_error("every_seconds", "Give a cron expression or an interval, not both.")
        elif cron is None and seconds is None:
            self.add_error("cron", "Give a cron expression (or an interval in seconds).")
        data["cron"] = cron
        if cron is not None:
            self._check("cron", schedules.check_cron, cron)
        every_ms = None if seconds is None else self._check("every_seconds", schedules.check_every, seconds)
        self.instance.every_ms = every_ms
        if data.get("timezone"):
            self._check("timezone", schedules.check_timezone, data["timezone"])
        payload = {} if data.get("payload") is None else data["payload"]
        data["payload"] = payload
        self._check("payload", lambda v: arguments.payload(v), payload)
        if not self.errors:
            # The first tick in the schedule's zone, with the bounds of a worker's check: a
            # timing no walk can compute is refused here, not at save.
            field = "cron" if cron is not None else "every_seconds"
            self.first_tick_at = self._check(
                field, lambda _: schedules.first_tick(cron, every_ms, data.get("timezone") or "UTC"), None
            )
        return data


@admin.register(Schedule)
class ScheduleAdmin(DatabaseAdmin):
    form = ScheduleForm
    list_display = (
        "name",
        "queue",
        "channel",
        "timing",
        "enabled",
        "next_tick",
        "last_tick",
        "source",
        "error_excerpt",
    )
    list_filter = ("queue", "enabled")
    search_fields = ("name",)
    list_per_page = 100
    show_facets = admin.ShowFacets.NEVER
    actions = ("pause", "resume")
    readonly_fields = (
        "next_tick",
        "last_tick",
        "last_message",
        "last_error",
        "source",
        "declared_pretty",
        "created_at",
    )

    # -- columns ---------------------------------------------------------------------------

    @admin.display(description="timing")
    def timing(self, obj: Schedule) -> str:
        if obj.cron is not None:
            return f"{obj.cron} ({obj.timezone})"
        seconds = (obj.every_ms or 0) / 1000
        return f"every {seconds:g} s"

    @admin.display(description="next tick", ordering="next_tick_at")
    def next_tick(self, obj: Schedule) -> str:
        if not obj.enabled:
            return "paused"
        return when(obj.next_tick_at)

    @admin.display(description="last tick", ordering="last_tick_at")
    def last_tick(self, obj: Schedule) -> str:
        return when(obj.last_tick_at)

    @admin.display(description="last message")
    def last_message(self, obj: Schedule) -> str:
        if obj.last_message_id is None:
            return "-"
        url = reverse("admin:django_lonnymq_message_changelist") + "?" + urlencode({"q": obj.last_message_id})
        return format_html('<a href="{}">{}</a>', url, obj.last_message_id)

    @admin.display(description="declared")
    def source(self, obj: Schedule) -> str:
        return "in code" if obj.from_code else "in the admin"

    @admin.display(description="error")
    def error_excerpt(self, obj: Schedule) -> str:
        return (obj.last_error or "")[:80]

    @admin.display(description="as the code declares it")
    def declared_pretty(self, obj: Schedule) -> str:
        if obj.declared is None:
            return "-"
        return format_html("<pre>{}</pre>", json.dumps(obj.declared, indent=2, sort_keys=True))

    # -- forms ------------------------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        edit = (
            "queue",
            "channel",
            "cron",
            "every_seconds",
            "timezone",
            "payload",
            "catch_up",
            "max_attempts",
            "enabled",
        )
        if obj is None:
            return [(None, {"fields": ("name", *edit)})]
        description = (
            "Declared in code with @periodic: edits made here stay until the declaration itself "
            "changes in code (then the next worker start writes the code's version)."
            if obj.from_code
            else "Added in the admin: workers never change it."
        )
        return [
            (None, {"fields": ("name", "source"), "description": description}),
            (
                "Schedule",
                {"fields": edit, "description": "Changes take effect at the workers' next tick check."},
            ),
            ("Ticks", {"fields": ("next_tick", "last_tick", "last_message", "last_error", "created_at")}),
            ("Code", {"fields": ("declared_pretty",), "classes": ("collapse",)}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is not None and obj.from_code:
            # The name ties the row to its declaration: renamed, the next sync would delete it.
            return ("name", *self.readonly_fields)
        return self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Schedule, form: forms.ModelForm, change: bool) -> None:
        """Insert, or update only what the form changed (the workers' columns are left alone);
        a new timing, or a schedule enabled again, ticks next at its first tick from now."""
        changed = set(form.changed_data)
        if "every_seconds" in changed:
            changed.add("every_ms")
        changed.discard("every_seconds")
        retime = (
            not change
            or bool(changed & set(TIMING_FIELDS))
            or ("enabled" in changed and obj.enabled)
            or (obj.enabled and obj.next_tick_at is None)  # parked by an error: saving retries it
        )
        if retime:
            first = getattr(form, "first_tick_at", None)
            obj.next_tick_at = (
                first if first is not None else schedules.first_tick(obj.cron, obj.every_ms, obj.timezone)
            )
            obj.last_error = None
            changed |= {"next_tick_at", "last_error"}
        if not change:
            obj.save(using=queue_write_database(obj.queue, Schedule))  # on its queue's database
        elif changed:
            obj.save(update_fields=sorted(changed))

    # -- actions ----------------------------------------------------------------------------

    @admin.action(description="Pause selected schedules (no tick until resumed)", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        done = 0
        for schedule in queryset.filter(enabled=True):
            Schedule.objects.using(queryset.db).filter(pk=schedule.pk).update(enabled=False)
            self.log_change(request, schedule, "Paused")
            done += 1
        self.message_user(request, f"Paused {done} schedule{'s' if done != 1 else ''}.", messages.SUCCESS)

    @admin.action(
        description="Resume selected schedules (next tick from now; ticks missed while paused are skipped)",
        permissions=["change"],
    )
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        done, failed = 0, []
        for schedule in queryset.filter(enabled=False):
            try:
                following = schedules.first_tick(schedule.cron, schedule.every_ms, schedule.timezone)
            except InvalidArgument as exc:
                failed.append(f"{schedule.name}: {exc}")
                continue
            Schedule.objects.using(queryset.db).filter(pk=schedule.pk).update(
                enabled=True, next_tick_at=following, last_error=None
            )
            self.log_change(request, schedule, "Resumed")
            done += 1
        self.message_user(request, f"Resumed {done} schedule{'s' if done != 1 else ''}.", messages.SUCCESS)
        for failure in failed:
            self.message_user(request, f"Not resumed, fix its timing first: {failure}", messages.ERROR)
