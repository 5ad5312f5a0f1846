"""An async view that enqueues, as users write them (tests/eager/test_eager.py)."""

from django.http import HttpRequest, JsonResponse
from django.urls import path

from django_lonnymq import aenqueue


async def upload(request: HttpRequest) -> JsonResponse:
    message_id = await aenqueue("eager_effect", {"n": int(request.GET["n"])}, channel="async-view")
    return JsonResponse({"message_id": message_id})


urlpatterns = [path("upload/", upload)]
