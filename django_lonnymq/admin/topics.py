"""The topic pages: subscriptions (editable: they are configuration, not queue state) and
the unrouted-event counters (read only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from ..models import Subscription, Unrouted


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ("topic", "queue", "created_at")
    list_filter = ("topic",)
    search_fields = ("topic", "queue")
    show_facets = admin.ShowFacets.NEVER
    fields = ("topic", "queue")


@admin.register(Unrouted)
class UnroutedAdmin(admin.ModelAdmin):
    list_display = ("topic", "events", "last_published_at")
    search_fields = ("topic",)
    show_facets = admin.ShowFacets.NEVER

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # Deleting a counter resets it; the topic's next unrouted publish starts it again.
