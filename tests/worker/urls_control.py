"""An async view that enqueues to an ``async def`` handler (tests/worker/test_running_control.py)."""

from django.http import HttpRequest, JsonResponse
from django.urls import path

from django_lonnymq import aenqueue


async def start_job(request: HttpRequest) -> JsonResponse:
    message_id = await aenqueue("ctl_async", {"seconds": 0.01, "n": int(request.GET["n"])}, channel="view")
    return JsonResponse({"message_id": message_id})


urlpatterns = [path("start-job/", start_job)]
