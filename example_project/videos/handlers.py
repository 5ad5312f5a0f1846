from django_lonnymq import Message, handler

from .models import Video


@handler("videos")
def transcode(message: Message) -> None:
    Video.objects.get(id=message.payload["video_id"]).transcode()  # raise to retry
