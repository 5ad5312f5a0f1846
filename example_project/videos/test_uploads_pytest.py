import pytest
from django.contrib.auth.models import User

from .models import Video


@pytest.fixture
def ada(client, db):
    user = User.objects.create_user("ada")
    client.force_login(user)
    return user


def test_upload_enqueues_a_transcode_for_the_user(client, ada, lonnymq_enqueued):
    client.post("/upload/", {"title": "Holiday"})
    lonnymq_enqueued.assert_enqueued("videos", channel=f"user-{ada.id}", count=1)
    assert lonnymq_enqueued.payloads("videos") == [{"video_id": Video.objects.get().id}]


def test_upload_transcodes(client, ada, lonnymq_eager):
    client.post("/upload/", {"title": "Holiday"})
    assert Video.objects.get().transcoded


def test_a_worker_transcodes_every_upload(client, ada, lonnymq_drain):
    for title in ("One", "Two", "Three"):
        client.post("/upload/", {"title": title})
    assert lonnymq_drain("videos").acked == 3
    assert Video.objects.filter(transcoded=True).count() == 3
