from django.conf import settings
from django.db import models


class Video(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    title = models.CharField(max_length=200)
    transcoded = models.BooleanField(default=False)

    def transcode(self) -> None:
        # ... the slow work: read the upload, write the renditions ...
        self.transcoded = True
        self.save(update_fields=["transcoded"])
