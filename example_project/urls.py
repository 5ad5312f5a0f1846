from django.contrib import admin
from django.urls import include, path

from django_lonnymq.prometheus import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/lonnymq/", metrics, name="lonnymq-metrics"),
    path("", include("example_project.videos.urls")),  # the README's quickstart
]
