"""The workflows pages: the list by state and tenant (the workflow's channel), one page per
workflow with its steps drawn as a graph (server-rendered SVG, each step coloured by its
state) and listed, and the cancel and "requeue failed steps" actions (each through
:mod:`django_lonnymq.workflows`, with the change permission)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.db import router
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import ngettext

from .. import workflows
from ..models import WorkflowRecord
from ..urlparams import storable
from .common import (
    CHANNEL_FILTER_LIMIT,
    ReadOnlyQueueAdmin,
    button_urls,
    refused_post,
    unstorable_query,
    when,
)

# Fill colours of a step by state (the legend under the graph says the same).
COLOURS = {
    "waiting": "#e0e0e0",
    "queued": "#cfe2ff",
    "running": "#ffe08a",
    "succeeded": "#b7e4c7",
    "dead": "#f5a3a3",
    "cancelled": "#bdbdbd",
}
# A graph of more steps is not drawn (the table below lists them all).
MAX_DRAWN = 400
BOX_W, BOX_H, GAP_X, GAP_Y = 150, 34, 60, 14


class TenantFilter(admin.SimpleListFilter):
    title = "tenant (channel)"
    parameter_name = "channel"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = (
            WorkflowRecord.objects.exclude(channel=None)
            .order_by("channel")
            .values_list("channel", flat=True)
            .distinct()
        )
        return [(str(name), str(name)) for name in names[:CHANNEL_FILTER_LIMIT]]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value and storable(value) is None:
            return queryset.none()
        return queryset.filter(channel=value) if value else queryset


def layers(steps: list[workflows.StepState]) -> dict[int, int]:
    """Each step's column: the length of the longest path of parents above it."""
    depth: dict[int, int] = {}
    for step in steps:  # ids ascend along every edge: parents come first
        depth[step.id] = 1 + max((depth.get(p, 0) for p in step.parents), default=-1)
    return depth


def graph_svg(steps: list[workflows.StepState]) -> SafeString:
    """The steps as boxes in columns by depth, edges from parent to child."""
    depth = layers(steps)
    columns: dict[int, list[workflows.StepState]] = {}
    for step in steps:
        columns.setdefault(depth[step.id], []).append(step)
    where: dict[int, tuple[int, int]] = {}
    for col, members in columns.items():
        for row, step in enumerate(members):
            where[step.id] = (10 + col * (BOX_W + GAP_X), 10 + row * (BOX_H + GAP_Y))
    width = 20 + len(columns) * (BOX_W + GAP_X) - GAP_X
    height = 20 + max(len(m) for m in columns.values()) * (BOX_H + GAP_Y) - GAP_Y
    edges = format_html_join(
        "",
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#888" marker-end="url(#lq-arrow)"/>',
        (
            (where[p][0] + BOX_W, where[p][1] + BOX_H // 2, where[s.id][0], where[s.id][1] + BOX_H // 2)
            for s in steps
            for p in s.parents
            if p in where
        ),
    )
    boxes = format_html_join(
        "",
        '<g class="lq-step lq-step-{}"><title>{} ({}): {}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="5" fill="{}" stroke="#555"/>'
        '<text x="{}" y="{}" font-size="12" font-family="sans-serif">{}</text>'
        '<text x="{}" y="{}" font-size="10" font-family="sans-serif" fill="#333">{}</text></g>',
        (
            (
                s.state, s.name, s.queue, s.state,
                where[s.id][0], where[s.id][1], BOX_W, BOX_H, COLOURS.get(s.state, "#fff"),
                where[s.id][0] + 6, where[s.id][1] + 14, s.name[:22],
                where[s.id][0] + 6, where[s.id][1] + 28, f"{s.queue[:14]} · {s.state}",
            )
            for s in steps
        ),
    )  # fmt: skip
    return format_html(
        '<svg id="lq-workflow-graph" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
        'viewBox="0 0 {} {}" role="img" aria-label="the workflow\'s steps">'
        '<defs><marker id="lq-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker></defs>{}{}</svg>',
        width, height, width, height, edges, boxes,
    )  # fmt: skip


@admin.register(WorkflowRecord)
class WorkflowAdmin(ReadOnlyQueueAdmin):
    list_display = ("id", "name", "channel", "state", "progress", "created", "finished")
    list_filter = ("state", TenantFilter)
    sortable_by = ("id",)
    actions = ("cancel", "requeue_failed")
    search_help_text = "A workflow id."
    fields = (
        "id",
        "name",
        "channel",
        "state",
        "progress",
        "created_at",
        "finished_at",
        "graph",
        "step_table",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = WorkflowRecord.objects.using(router.db_for_read(WorkflowRecord)).defer(
            "on_failure_payload"
        )
        return queryset.none() if unstorable_query(request) else queryset  # as StorableOnly does

    # -- the workflow's own page: Cancel and Requeue failed steps buttons (POST) -----------

    def get_urls(self) -> list[Any]:
        buttons = [("cancel", self.cancel_view), ("requeue-failed", self.requeue_failed_view)]
        return [*button_urls(self, buttons), *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The buttons show for the change permission (the page itself stays read-only).
        context = {**(extra_context or {}), "lq_can_act": self.has_change_permission(request)}
        return super().change_view(request, object_id, form_url, context)

    def _acted_on(self, request: HttpRequest, object_id: str) -> WorkflowRecord | HttpResponse:
        """The workflow a button posts to, once the method and the permission are right."""
        refused = refused_post(self, request)
        if refused is not None:
            return refused
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"workflow {object_id} does not exist (pruned?)")
        return obj

    def _back(self, obj: WorkflowRecord) -> HttpResponseRedirect:
        name = f"admin:{self.opts.app_label}_{self.opts.model_name}_change"
        return HttpResponseRedirect(reverse(name, args=[obj.pk], current_app=self.admin_site.name))

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._acted_on(request, object_id)
        if isinstance(obj, HttpResponse):
            return obj
        if obj.state in ("succeeded", "cancelled"):
            self.message_user(
                request, f"Workflow {obj.pk} is {obj.state}: nothing to cancel.", messages.WARNING
            )
            return self._back(obj)
        told = workflows.cancel_workflow(obj.pk, using=router.db_for_write(WorkflowRecord))
        self.message_user(
            request, f"Cancelled workflow {obj.pk} ({told:,} running steps told to stop).", messages.SUCCESS
        )
        return self._back(obj)

    def requeue_failed_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        obj = self._acted_on(request, object_id)
        if isinstance(obj, HttpResponse):
            return obj
        if obj.state == "cancelled":  # its dead steps stay dead (requeue_failed_steps refuses)
            self.message_user(
                request, f"Workflow {obj.pk} is cancelled: its failed steps stay dead.", messages.WARNING
            )
            return self._back(obj)
        requeued = workflows.requeue_failed_steps(obj.pk, using=router.db_for_write(WorkflowRecord))
        if requeued:
            self.message_user(
                request,
                f"Requeued {len(requeued):,} {ngettext('failed step', 'failed steps', len(requeued))} of workflow {obj.pk}.",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, f"Workflow {obj.pk} has no failed step to requeue.", messages.WARNING)
        return self._back(obj)

    @admin.display(description="created at", ordering="created_at")
    def created(self, obj: WorkflowRecord) -> str:
        return when(obj.created_at)

    @admin.display(description="finished at", ordering="finished_at")
    def finished(self, obj: WorkflowRecord) -> str:
        return when(obj.finished_at)

    @admin.display(description="steps done")
    def progress(self, obj: WorkflowRecord) -> str:
        text = f"{obj.steps - obj.remaining:,} / {obj.steps:,}"
        return f"{text}, {obj.dead:,} dead" if obj.dead else text

    def _state(self, obj: WorkflowRecord) -> workflows.WorkflowState:
        cached: workflows.WorkflowState | None = getattr(obj, "_lq_state", None)
        if cached is None:
            cached = workflows.workflow(obj.id, using=router.db_for_read(WorkflowRecord))
            obj._lq_state = cached  # type: ignore[attr-defined]  # one read per row of the page
        return cached

    @admin.display(description="graph")
    def graph(self, obj: WorkflowRecord) -> SafeString:
        steps = list(self._state(obj).steps)
        if len(steps) > MAX_DRAWN:
            return format_html("<em>{} steps: too many to draw (at most {}); they are listed below.</em>",
                               len(steps), MAX_DRAWN)  # fmt: skip
        legend = format_html_join(
            " ",
            '<span style="background:{};border:1px solid #555;padding:0 6px;">{}</span>',
            ((colour, state) for state, colour in COLOURS.items()),
        )
        return format_html(
            '<div style="overflow:auto;max-width:100%;">{}</div><p>{}</p>', graph_svg(steps), legend
        )

    @admin.display(description="steps")
    def step_table(self, obj: WorkflowRecord) -> SafeString:
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (s.id, s.name, s.queue, s.channel, s.state, s.attempts if s.attempts is not None else "-",
                 when(s.released_at), when(s.finished_at))
                for s in self._state(obj).steps[:2000]
            ),
        )  # fmt: skip
        head = mark_safe(
            "<tr><th>id (message)</th><th>name</th><th>queue</th><th>channel</th><th>state</th>"
            "<th>attempts</th><th>released</th><th>finished</th></tr>"
        )
        return format_html('<table id="lq-workflow-steps">{}{}</table>', head, rows)

    @admin.action(description="Cancel (waiting, queued and running steps)", permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[WorkflowRecord]) -> None:
        using = router.db_for_write(WorkflowRecord)
        ids = list(queryset.values_list("id", flat=True)[:1000])
        told = sum(workflows.cancel_workflow(i, using=using) for i in ids)
        self.message_user(
            request,
            f"Cancelled {len(ids):,} workflows ({told:,} running steps told to stop).",
            messages.SUCCESS,
        )

    @admin.action(description="Requeue failed steps (the workflows run again)", permissions=["change"])
    def requeue_failed(self, request: HttpRequest, queryset: QuerySet[WorkflowRecord]) -> None:
        using = router.db_for_write(WorkflowRecord)
        # A cancelled workflow's dead steps stay dead (requeue_failed_steps refuses them).
        ids = list(queryset.exclude(state="cancelled").values_list("id", flat=True)[:1000])
        requeued = sum(len(workflows.requeue_failed_steps(i, using=using)) for i in ids)
        self.message_user(
            request,
            f"Requeued {requeued:,} {ngettext('failed step', 'failed steps', requeued)}.",
            messages.SUCCESS,
        )
