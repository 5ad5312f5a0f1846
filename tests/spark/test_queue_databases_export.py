"""``manage.py lonnymq_spark_export`` writes to the queue's database (``LONNYMQ_QUEUE_DATABASES``)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

from django_lonnymq.management.commands.lonnymq_spark_export import dsn_from_settings
from tests.spark.helpers import messages


@pytest.mark.django_db(databases=["default", "other"], transaction=True)
def test_the_export_command_writes_to_the_queues_database(spark: Any, tmp_path: Path, settings) -> None:
    settings.LONNYMQ_QUEUE_DATABASES = {"uploads_elsewhere": "other"}
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps({"tenant": f"t{i % 3}", "n": i}) + "\n" for i in range(30)))

    call_command(
        "lonnymq_spark_export", "--input", str(path), "--queue", "uploads_elsewhere", "--channel-col", "tenant",
        stdout=io.StringIO(),
    )  # fmt: skip

    other = dsn_from_settings(connections["other"].settings_dict)
    default = dsn_from_settings(connections["default"].settings_dict)
    assert sorted(m["payload"]["n"] for m in messages(other, "uploads_elsewhere")) == list(range(30))
    assert messages(default, "uploads_elsewhere") == []
