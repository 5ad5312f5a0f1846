from django.contrib.auth.models import User
from django.test import TestCase

from django_lonnymq.testing import eager

from .models import Video


class UploadTests(TestCase):
    def test_upload_transcodes(self):
        self.client.force_login(User.objects.create_user("ada"))
        with eager():
            self.client.post("/upload/", {"title": "Holiday"})
        self.assertTrue(Video.objects.get().transcoded)
