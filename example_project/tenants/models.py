"""The demo's scoreboard: one row per finished job, written by the handler."""

from django.db import models


class JobRun(models.Model):
    """A finished run of a job (the demo counts and times tenants with these).

    ``queue`` tells the demo's two workloads apart: ``transcode`` (the fairness demo) and
    ``ingest`` (the Spark step, example_project/spark_demo.py).
    """

    queue = models.CharField(max_length=100, default="transcode")
    message_id = models.BigIntegerField(db_index=True)
    tenant = models.CharField(max_length=200, db_index=True)
    seconds = models.FloatField(help_text="Simulated work, from the payload.")
    attempt = models.IntegerField()
    worker_pid = models.IntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()

    class Meta:
        ordering = ["finished_at"]

    def __str__(self) -> str:
        return f"{self.tenant} job {self.message_id}"
