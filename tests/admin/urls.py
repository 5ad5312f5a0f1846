"""The example project's URLs plus the metrics view, as docs/admin.md shows."""

from django.contrib import admin
from django.urls import path

from django_lonnymq.prometheus import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/", metrics, name="lonnymq-metrics"),
]
