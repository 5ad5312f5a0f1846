"""Handlers of the example project: they simulate work of very different sizes."""

import time

from django_lonnymq import Message, handler


@handler("transcode")
def transcode(message: Message) -> None:
    """Pretend to transcode a video: the payload says how long it takes."""
    time.sleep(float(message.payload.get("seconds", 0.0)))
