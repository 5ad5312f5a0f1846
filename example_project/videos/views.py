from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import JsonResponse
from django.views.decorators.http import require_POST

from django_lonnymq import enqueue

from .models import Video


@login_required
@require_POST
def upload(request):
    with transaction.atomic():  # the job commits or rolls back with the upload
        video = Video.objects.create(owner=request.user, title=request.POST["title"])
        enqueue("videos", {"video_id": video.id}, channel=f"user-{request.user.id}")
    return JsonResponse({"id": video.id})
