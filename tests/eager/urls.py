"""An async view that enqueues, as users write them (tests/eager/test_eager.py)."""

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path

from django_lonnymq import aenqueue, enqueue


async def upload(request: HttpRequest) -> JsonResponse:
    message_id = await aenqueue("eager_effect", {"n": int(request.GET["n"])}, channel="async-view")
    return JsonResponse({"message_id": message_id})


def _store(n: int) -> int:
    with transaction.atomic():  # the writes and the enqueue commit together
        return enqueue("eager_atomic", {"n": n}, channel="async-view")


async def atomic_upload(request: HttpRequest) -> JsonResponse:
    """An async view that enqueues in one transaction with its writes (the README's advice)."""
    message_id = await sync_to_async(_store)(int(request.POST["n"]))
    return JsonResponse({"message_id": message_id})


urlpatterns = [path("upload/", upload), path("atomic-upload/", atomic_upload)]
