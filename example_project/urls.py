from django.contrib import admin
from django.urls import path

from django_lonnymq.prometheus import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/lonnymq/", metrics, name="lonnymq-metrics"),
]
