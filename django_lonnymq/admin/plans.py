"""The plan pages: named sets of limits (pricing tiers) that channels follow.

Every write goes through :func:`django_lonnymq.api.configure_plan` (a change reaches every
channel of the plan in one SQL statement) and :func:`~django_lonnymq.api.delete_plan`,
which refuses a plan in use; never an ORM save.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import router
from django.db.models import Count, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from .. import api, bounds
from ..exceptions import LonnyMQError
from ..models import Channel, Plan
from .common import NoBulkDelete, RateField, StorableOnly, rate_text

MAX_RELEASE_INTERVAL_MS = bounds.MAX_INTERVAL // timedelta(milliseconds=1)


class PlanForm(forms.ModelForm):
    rate = RateField()

    class Meta:
        model = Plan
        fields = ["name", "weight", "max_concurrency", "release_interval_ms", "ordered"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["rate"] = self.instance.rate
        for name, low in (("weight", 1), ("max_concurrency", 1), ("release_interval_ms", 0)):
            if name in self.fields:
                self.fields[name].widget.attrs["min"] = low

    def clean_weight(self) -> int:
        value = self.cleaned_data["weight"]
        if not 1 <= value <= bounds.MAX_WEIGHT:
            raise forms.ValidationError(f"Weight must be between 1 and {bounds.MAX_WEIGHT}.")
        return int(value)

    def clean(self) -> dict[str, Any]:
        """The channels that would refuse the change (configure_plan says the same, later)."""
        data = super().clean() or self.cleaned_data
        if self.instance.pk is None:
            return data
        channels = Channel.objects.using(router.db_for_read(Channel)).filter(plan_id=self.instance.pk)
        if data.get("ordered") and not self.instance.ordered:
            clash = (
                channels.filter(own_ordered=False, own_max_concurrency=True)
                .exclude(max_concurrency=1)
                .order_by("id")
                .first()
            )
            if clash is not None:
                raise forms.ValidationError(
                    f"Channel {clash} sets its own max concurrency ({clash.max_concurrency or 'unlimited'}): "
                    "let its cap follow the plan, or make it unordered on its own page, first."
                )
        return data

    def clean_max_concurrency(self) -> int | None:
        value = self.cleaned_data.get("max_concurrency")
        if value is not None and not 1 <= value <= bounds.MAX_INT4:
            raise forms.ValidationError("Max concurrency must be at least 1, or empty for no cap.")
        return value

    def clean_release_interval_ms(self) -> int:
        value = self.cleaned_data["release_interval_ms"]
        if not 0 <= value <= MAX_RELEASE_INTERVAL_MS:
            raise forms.ValidationError(
                f"Release interval must be between 0 and 366 days ({MAX_RELEASE_INTERVAL_MS} ms)."
            )
        return int(value)


@admin.register(Plan)
class PlanAdmin(NoBulkDelete, StorableOnly, admin.ModelAdmin):
    form = PlanForm
    list_display = (
        "name",
        "weight",
        "cap",
        "release_interval_ms",
        "rate_display",
        "ordered",
        "channel_count",
        "default_of",
    )
    readonly_fields = ("channel_count", "default_of", "updated_at")
    search_fields = ("name",)
    show_facets = admin.ShowFacets.NEVER

    def get_queryset(self, request: HttpRequest) -> QuerySet[Plan]:
        return super().get_queryset(request).annotate(lq_channels=Count("channels", distinct=True))

    def get_fields(self, request: HttpRequest, obj: Plan | None = None) -> Any:
        limits = ("weight", "max_concurrency", "release_interval_ms", "rate", "ordered")
        if obj is None:
            return ("name", *limits)
        return ("name", *limits, "channel_count", "default_of", "updated_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Plan | None = None) -> Any:
        if obj is None:
            return ()
        return ("name", *self.readonly_fields)  # renaming is not an operation

    @admin.display(description="max concurrency")
    def cap(self, obj: Plan) -> str:
        return "-" if obj.max_concurrency is None else f"{obj.max_concurrency:,}"

    @admin.display(description="rate")
    def rate_display(self, obj: Plan) -> str:
        return rate_text(obj.rate_count, obj.rate_period_ms, obj.rate_burst)

    @admin.display(description="channels")
    def channel_count(self, obj: Plan) -> str:
        count = getattr(obj, "lq_channels", None)
        if count is None:
            count = obj.channels.count()
        url = (
            reverse("admin:django_lonnymq_channel_changelist") + "?" + urlencode({"plan__id__exact": obj.pk})
        )
        return format_html('<a href="{}">{}</a>', url, f"{count:,}")

    @admin.display(description="default plan of")
    def default_of(self, obj: Plan) -> str:
        queues = sorted(obj.default_of.values_list("queue", flat=True))
        return ", ".join(queues) if queues else "-"

    def save_model(self, request: HttpRequest, obj: Plan, form: forms.ModelForm, change: bool) -> None:
        """Create or change through ``api.configure_plan``; only the changed limits are passed."""
        fields = (
            set(form.changed_data)
            if change
            else {"weight", "max_concurrency", "release_interval_ms", "rate", "ordered"}
        )
        changes: dict[str, Any] = {}
        if "weight" in fields:
            changes["weight"] = obj.weight
        if "max_concurrency" in fields:
            changes["max_concurrency"] = obj.max_concurrency
        if "release_interval_ms" in fields:
            changes["release_interval"] = timedelta(milliseconds=obj.release_interval_ms)
        if "rate" in fields and "rate" in form.cleaned_data:
            changes["rate"] = form.cleaned_data["rate"]
        if "ordered" in fields:
            changes["ordered"] = obj.ordered
        using = router.db_for_write(Plan)
        changed = api.configure_plan(obj.name, using=using, **changes)
        saved = Plan.objects.using(using).get(name=obj.name)
        obj.pk = saved.pk
        obj._state.adding = False
        if change:
            messages.info(request, f"{changed:,} channel(s) of plan {obj.name} took the new limits.")

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass

    # -- delete: only a plan no channel follows, through the SQL function -------------------

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        to_delete, protected = [], []
        for plan in objs:
            to_delete.append(str(plan))
            channels = plan.channels.count()
            queues = plan.default_of.count()
            if channels:
                protected.append(f"{channels:,} channel(s) follow plan {plan} (give them another plan first)")
            if queues:
                protected.append(f"{queues:,} queue(s) give plan {plan} to their new channels")
        perms_needed: set[str] = set()
        if not self.has_delete_permission(request):
            perms_needed.add(str(Plan._meta.verbose_name))
        return to_delete, {str(Plan._meta.verbose_name_plural): len(to_delete)}, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: Plan) -> None:
        try:
            api.delete_plan(obj.name, using=router.db_for_write(Plan))
        except LonnyMQError as exc:  # in use since the confirmation page
            messages.error(request, str(exc))
