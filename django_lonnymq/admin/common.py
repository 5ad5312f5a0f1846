"""What the admin's pages share: times, counts, permission checks, batches of ids, the rate
field, the queue filter and the read-only base of the message lists.

Imports no page module (and not the package): every page imports this one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import router
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, QueryDict
from django.urls import URLPattern, path, reverse
from django.utils import formats, timezone
from django.utils.functional import cached_property
from django.utils.html import format_html

from .. import statements
from ..exceptions import InvalidArgument
from ..models import Channel, Message
from ..rates import Rate
from ..routing import queue_database, queue_databases
from ..urlparams import an_id, storable

# Ready and scheduled counts of a channel stop at this many (shown as "10,000+"), and so do
# filtered counts of the message and dead-letter lists.
COUNT_CAP = 10_000
# Ids per SQL call when an action runs over many rows ("select all").
ACTION_BATCH = 1_000
# Most channels listed in the message list's channel filter.
CHANNEL_FILTER_LIMIT = 100


def ms_to_datetime(ms: int | None) -> datetime | None:
    """Queue time (ms since the epoch) as an aware datetime."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def now_ms() -> int:
    """The time now in ms since the epoch (the page's clock: close enough to the queue's to
    tell past from future on a page)."""
    return int(time.time() * 1000)


def when(value: datetime | int | None) -> str:
    """A time as the admin shows one: in the user's time zone and date format (Django's
    ``localtime`` and ``DATE_FORMAT``) with the time to the second (a queue's times are seconds
    apart, ``DATETIME_FORMAT`` stops at the minute); a queue time in ms is read as one; "-" for
    none."""
    if value is None:
        return "-"
    moment = timezone.localtime(ms_to_datetime(value) if isinstance(value, int) else value)
    return f"{formats.date_format(moment, 'DATE_FORMAT')}, {formats.time_format(moment, 'H:i:s')}"


def count_text(n: int | None) -> str:
    """A count as shown: "-" when unknown, "10,000+" at the cap."""
    if n is None:
        return "-"
    return f"{COUNT_CAP:,}+" if n >= COUNT_CAP else f"{n:,}"


def excerpt(text: str | None, length: int = 80) -> str:
    """The last line of a traceback, cut to ``length``."""
    if not text:
        return ""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    return line if len(line) <= length else line[: length - 1] + "…"


def has_perm(request: HttpRequest, model: type[Any], action: str) -> bool:
    return request.user.has_perm(f"{model._meta.app_label}.{action}_{model._meta.model_name}")


def batches(queryset: QuerySet[Any], size: int = ACTION_BATCH) -> Iterator[list[int]]:
    """The queryset's ids in lists of ``size``, in id order."""
    batch: list[int] = []
    for pk in queryset.order_by("pk").values_list("pk", flat=True).iterator(chunk_size=size):
        batch.append(pk)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def run_in_batches(queryset: QuerySet[Any], call: Callable[[list[int]], Iterable[int]]) -> int:
    """Calls ``call`` once per batch of ids; how many ids the calls returned in all."""
    return sum(len(list(call(ids))) for ids in batches(queryset))


def leased_by_link(obj: Message) -> str:
    """A message's ``leased_by`` as a link to its worker's page."""
    if not obj.leased_by:
        return "-"
    url = reverse("admin:django_lonnymq_worker_change", args=[quote(obj.leased_by)])
    return format_html('<a href="{}">{}</a>', url, obj.leased_by)


# ---------------------------------------------------------------------------------------
# Rates (the channel and the queue-limits forms)
# ---------------------------------------------------------------------------------------

RATE_HELP = 'N per period, with an optional burst: "100 / min, burst 20", "10 / s", "5 / 2 h". Empty: none.'


class RateField(forms.CharField):
    """A token bucket as text; cleans to a :class:`Rate` or None."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", RATE_HELP)
        kwargs.setdefault("max_length", 100)
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        return str(value) if isinstance(value, Rate) else value

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.clean(data) != (Rate.of(initial) if initial else None)
        except (forms.ValidationError, InvalidArgument):
            return True

    def clean(self, value: Any) -> Rate | None:
        text = super().clean(value)
        if not text or not text.strip():
            return None
        try:
            return Rate.parse(text)
        except InvalidArgument as exc:
            raise forms.ValidationError(str(exc)) from None


def rate_text(count: int | None, period_ms: int | None, burst: int | None) -> str:
    rate = Rate.from_ms(count, period_ms, burst)
    return str(rate) if rate else "-"


# ---------------------------------------------------------------------------------------
# Counting without COUNT(*) over a million rows
# ---------------------------------------------------------------------------------------


class EstimatedCountPaginator(Paginator):
    """A paginator whose count never scans a large table.

    Unfiltered list: the planner's row estimate (``pg_class.reltuples``) once it exceeds
    ``COUNT_CAP`` (``count_is_estimate``). Filtered list, or a small table: an exact count of at
    most ``COUNT_CAP`` + 1 rows (a ``LIMIT`` subquery); beyond that ``count_is_capped`` is set and
    the list shows the first ``COUNT_CAP`` matches.
    """

    count_is_estimate = False
    count_is_capped = False

    @cached_property
    def count(self) -> int:
        queryset: QuerySet[Any] = self.object_list  # type: ignore[assignment]
        if not queryset.query.where:
            estimate = statements.estimated_rows(table=queryset.model._meta.db_table, on=queryset.db)
            if estimate is not None and estimate > COUNT_CAP:
                self.count_is_estimate = True
                return int(estimate)
        exact = queryset.order_by()[: COUNT_CAP + 1].count()
        if exact > COUNT_CAP:
            self.count_is_capped = True
            return COUNT_CAP
        return exact


# ---------------------------------------------------------------------------------------
# The message lists: their queue filter and read-only base
# ---------------------------------------------------------------------------------------


def queues(using: str | None = None) -> list[str]:
    channels = Channel.objects.using(using) if using else Channel.objects
    return list(channels.order_by("queue").values_list("queue", flat=True).distinct())


def in_channels(queryset: QuerySet[Message], channel_ids: list[int]) -> QuerySet[Message]:
    """Messages of these channels, written so the planner can use the two partial indexes.

    No index covers ``channel_id`` for every message: the ready index has the messages at
    rest, the lease index those in flight. Splitting the condition on ``lease_until`` lets the
    planner OR two index scans instead of scanning the table (measured on 1M messages: a
    3-message channel's page in 1.5 ms instead of 840 ms).
    """
    return queryset.filter(
        Q(channel_id__in=channel_ids, lease_until__isnull=True)
        | Q(channel_id__in=channel_ids, lease_until__isnull=False)
    )


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(queue, queue) for queue in queues(read_database(request, Channel))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if storable(value) is None:
            return queryset.none()
        # A subquery, never the queue's channel ids as a literal list: a queue of 100,000
        # channels made that list 100,000 parameters long (seconds to send and plan). The
        # planner joins the channel table instead: newest messages first, each checked
        # against its channel's queue, or the queue's channels first when it has few.
        channels = Channel.objects.using(queryset.db).filter(queue=value).values("id")
        return queryset.filter(channel_id__in=channels)


# ---------------------------------------------------------------------------------------
# Several databases (LONNYMQ_QUEUE_DATABASES): a page shows one database at a time, chosen
# with ?database=<alias> (the filter below); actions and forms run on that database. With one
# database none of this shows and every page reads and writes as it always did.
# ---------------------------------------------------------------------------------------

DATABASE_PARAM = "database"


def several_databases() -> bool:
    return len(queue_databases()) > 1


def selected_database(request: HttpRequest) -> str:
    """The database a page shows: ``?database=``, also through a change page's preserved list
    filters; else ``LONNYMQ_DATABASE``."""
    aliases = queue_databases()
    asked = request.GET.get(DATABASE_PARAM)
    if asked is None:
        asked = QueryDict(request.GET.get("_changelist_filters", "")).get(DATABASE_PARAM)
    return asked if asked in aliases else aliases[0]


def write_database(request: HttpRequest, queryset_or_model: Any) -> str:
    """Where an action or a form writes: the page's database when there are several, else
    the project's router (as always)."""
    if several_databases():
        return selected_database(request)
    model = getattr(queryset_or_model, "model", queryset_or_model)
    return router.db_for_write(model)


def queue_write_database(queue: str, model: Any) -> str:
    """Where a write that names a queue goes: the queue's database when there are several
    (``LONNYMQ_QUEUE_DATABASES``), else the project's router (as always)."""
    if several_databases():
        return queue_database(queue)
    return router.db_for_write(model)


def read_database(request: HttpRequest, model: Any) -> str:
    """Where a filter's choices come from: the page's database, else the router's."""
    return selected_database(request) if several_databases() else router.db_for_read(model)


class DatabaseFilter(admin.SimpleListFilter):
    """The database a list shows (only when queues live on several)."""

    title = "database"
    parameter_name = DATABASE_PARAM

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        aliases = queue_databases()
        return [(alias, alias) for alias in aliases] if len(aliases) > 1 else []

    def choices(self, changelist: Any) -> Iterator[Any]:
        current = self.value() or queue_databases()[0]
        for lookup, title in self.lookup_choices:
            yield {
                "selected": current == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset  # DatabaseAdmin.get_queryset already reads the chosen database


class NoBulkDelete:
    """Leaves out Django's "delete selected" action: a bulk ORM delete would skip the checks of
    the SQL function the admin deletes through (an empty channel, a plan no channel follows).
    ``action_location`` is Django 6.1's parameter, passed on when given."""

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        parent = super()
        if action_location is None:
            actions = parent.get_actions(request)  # type: ignore[attr-defined]
        else:
            actions = parent.get_actions(request, action_location=action_location)  # type: ignore[attr-defined]
        actions.pop("delete_selected", None)
        return dict(actions)


def unstorable_query(request: HttpRequest) -> bool:
    """Whether a name or value of the request's query string holds what no text column can
    (a NUL, a lone surrogate): compared with a column it would be a database error."""
    return any(storable(name) is None for name in request.GET) or any(
        storable(value) is None for values in request.GET.lists() for value in values[1]
    )


class StorableOnly:
    """A page whose query string or object key holds what PostgreSQL cannot compare with text
    (a NUL, a lone surrogate) matches no row: an empty list, a missing object (Django's
    redirect or 404), never a database error and an HTTP 500."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        return queryset.none() if unstorable_query(request) else queryset

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        if storable(object_id) is None:
            return None
        return super().get_object(request, object_id, from_field)  # type: ignore[misc]


class DatabaseAdmin(StorableOnly, admin.ModelAdmin):
    """A list and detail pages of one database at a time when queues live on several."""

    def get_list_filter(self, request: HttpRequest) -> Any:
        found = tuple(super().get_list_filter(request))
        return (DatabaseFilter, *found) if several_databases() else found

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        return queryset.using(selected_database(request)) if several_databases() else queryset


class ReadOnlyQueueAdmin(DatabaseAdmin):
    """Lists and detail pages only: no add, no ORM change or delete; writes are actions."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    search_help_text = "A message id."

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The change permission enables the actions on the list; a detail page is read-only.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # removal goes through the actions (SQL functions), never an ORM delete

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # Payloads load only where shown (payload_pretty): one Python cannot decode (nested
        # too deep, stored before enqueue refused it) must not break the whole list.
        return super().get_queryset(request).defer("payload")

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Any], search_term: str) -> Any:
        term = search_term.strip()
        if not term:
            return queryset, False
        message_id = an_id(term)
        if message_id is not None:
            return queryset.filter(pk=message_id), False
        return queryset.none(), False

    def get_search_fields(self, request: HttpRequest) -> tuple[str, ...]:
        return ("id",)  # shows the search box; get_search_results does the (indexed) lookup

    @admin.display(description="attempts")
    def attempts_display(self, obj: Any) -> str:
        return f"{obj.attempts} / {obj.max_attempts}"

    @admin.display(description="last error")
    def error_excerpt(self, obj: Any) -> str:
        short = excerpt(obj.last_error, 40)
        if not short:
            return "-"
        return format_html('<span title="{}">{}</span>', excerpt(obj.last_error, 500), short)

    @admin.display(description="payload")
    def payload_pretty(self, obj: Any) -> str:
        try:
            payload = obj.payload
        except (RecursionError, ValueError) as exc:
            return format_html(
                "<em>payload cannot be decoded: {}</em>", excerpt(f"{type(exc).__name__}: {exc}")
            )
        return format_html("<pre>{}</pre>", json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False))

    @admin.display(description="last error")
    def last_error_full(self, obj: Any) -> str:
        return format_html("<pre>{}</pre>", obj.last_error) if obj.last_error else "-"


# -- buttons on a detail page (POST views beside the admin's own) ---------------------------


def button_urls(
    model_admin: admin.ModelAdmin, buttons: Iterable[tuple[str, Callable[..., Any]]]
) -> list[URLPattern]:
    """``<object_id>/<route>/`` for each (route, view), named ``<app>_<model>_lq_<route>``
    (dashes as underscores), behind the admin site's login and permission wrapper."""
    prefix = f"{model_admin.opts.app_label}_{model_admin.opts.model_name}"
    return [
        path(
            f"<path:object_id>/{route}/",
            model_admin.admin_site.admin_view(view),
            name=f"{prefix}_lq_{route.replace('-', '_')}",
        )
        for route, view in buttons
    ]


def refused_post(model_admin: admin.ModelAdmin, request: HttpRequest) -> HttpResponse | None:
    """A button's request, refused unless it is a POST by a user with the change permission
    (405 for another method; PermissionDenied, a 403, without the permission)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    return None
