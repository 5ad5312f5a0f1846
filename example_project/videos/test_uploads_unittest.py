from django.contrib.auth.models import User
from django.test import TestCase, TransactionTestCase

from django_lonnymq.testing import assert_enqueued, assert_nothing_enqueued, drain, eager

from .models import Video


class UploadTests(TestCase):
    def setUp(self):
        self.user = User.objects.create_user("ada")
        self.client.force_login(self.user)

    def test_upload_enqueues_a_transcode_for_the_user(self):
        self.client.post("/upload/", {"title": "Holiday"})
        (message,) = assert_enqueued("videos", channel=f"user-{self.user.id}", count=1)
        self.assertEqual(message.payload, {"video_id": Video.objects.get().id})

    def test_upload_transcodes(self):
        with eager():
            self.client.post("/upload/", {"title": "Holiday"})
        self.assertTrue(Video.objects.get().transcoded)
        assert_nothing_enqueued("videos")  # run and acked


class TranscodeWorkerTests(TransactionTestCase):
    def test_a_worker_transcodes_every_upload(self):
        self.client.force_login(User.objects.create_user("ada"))
        for title in ("One", "Two", "Three"):
            self.client.post("/upload/", {"title": title})
        self.assertEqual(drain("videos").acked, 3)
        self.assertEqual(Video.objects.filter(transcoded=True).count(), 3)
