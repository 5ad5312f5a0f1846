"""The topic pages: subscriptions (editable: they are configuration, not queue state) and
the unrouted-event counters (read only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ..models import Subscription, Unrouted
from .common import DatabaseAdmin, queue_write_database


@admin.register(Subscription)
class SubscriptionAdmin(DatabaseAdmin):
    list_display = ("topic", "queue", "created_at")
    list_filter = ("topic",)
    search_fields = ("topic", "queue")
    show_facets = admin.ShowFacets.NEVER
    fields = ("topic", "queue")

    def save_model(self, request: HttpRequest, obj: Subscription, form: Any, change: bool) -> None:
        # A subscription lives with its queue (LONNYMQ_QUEUE_DATABASES): a new one goes there.
        obj.save(using=obj._state.db if change else queue_write_database(obj.queue, Subscription))


@admin.register(Unrouted)
class UnroutedAdmin(DatabaseAdmin):
    list_display = ("topic", "events", "last_published_at")
    search_fields = ("topic",)
    show_facets = admin.ShowFacets.NEVER

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # Deleting a counter resets it; the topic's next unrouted publish starts it again.
