"""The entry points: ``manage.py lonnymq_spark_export``, the spark-submit script, the demo data
set, and the promise that executors never import Django."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_lonnymq.management.commands.lonnymq_spark_export import dsn_from_settings
from django_lonnymq.spark import ExportError
from django_lonnymq.spark.cli import input_format
from example_project.spark_demo import BIG_TENANT, generate_dataset
from tests import conftest as shared
from tests.spark.helpers import messages, refused_dsn


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=shared.ROOT, capture_output=True, text=True, timeout=60
    )


@pytest.mark.django_independent  # imports without Django, on purpose
@pytest.mark.parametrize(
    "module", ["django_lonnymq.spark", "django_lonnymq.spark.writer", "django_lonnymq.sql"]
)
def test_the_executor_side_imports_no_django(module: str) -> None:
    done = run_python(
        f"import {module}, sys; "
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')); "
        "assert not loaded, loaded; assert 'pyspark' not in sys.modules"
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.django_independent  # imports without Django, on purpose
def test_the_enqueue_many_query_is_read_without_django() -> None:
    done = run_python(
        "import sys; from django_lonnymq.sql import query; "
        "assert 'lonnymq_enqueue_many_v4' in query('enqueue_many'); assert 'django' not in sys.modules"
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.django_independent  # the spark CLI imports no Django
@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        ("a/b.parquet", "parquet"),
        ("out.parquet/", "parquet"),
        ("x.csv", "csv"),
        ("x.csv.gz", "csv"),
        ("x.jsonl", "json"),
        ("X.JSON", "json"),
    ],
)
def test_the_input_format_comes_from_the_extension(path: str, fmt: str) -> None:
    assert input_format(path) == fmt


@pytest.mark.django_independent  # the spark CLI imports no Django
def test_an_unknown_extension_asks_for_format() -> None:
    with pytest.raises(ExportError, match=r"cannot tell the format of 'data.txt'.*pass --format"):
        input_format("data.txt")
    assert input_format("data.txt", "csv") == "csv"


def test_the_dsn_comes_from_the_django_database_settings() -> None:
    dsn = dsn_from_settings(
        {
            "NAME": "jobs",
            "USER": "app",
            "PASSWORD": "pw",
            "HOST": "db",
            "PORT": 6543,
            "OPTIONS": {"sslmode": "require", "pool": True, "isolation_level": 1},
        }
    )

    assert dsn == "dbname=jobs user=app password=pw host=db port=6543 sslmode=require"


@pytest.mark.django_independent  # Spark alone
def test_the_demo_data_set_is_skewed(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "uploads.parquet")

    assert generate_dataset(path, rows=4000, tenants=1000, spark=spark) == 4000

    per_tenant = Counter(r["tenant"] for r in spark.read.parquet(path).select("tenant").collect())
    assert len(per_tenant) == 1000
    assert per_tenant[BIG_TENANT] == 2000
    assert max(n for t, n in per_tenant.items() if t != BIG_TENANT) <= 3
    assert spark.read.parquet(path).select("file_id").distinct().count() == 4000


@pytest.mark.django_db(transaction=True)
def test_the_management_command_shows_progress_and_counts(spark: Any, dsn: str, tmp_path: Path) -> None:
    path = str(tmp_path / "uploads.parquet")
    generate_dataset(path, rows=1000, tenants=20, spark=spark)
    out = io.StringIO()

    call_command(
        "lonnymq_spark_export",
        "--input",
        path,
        "--queue",
        "uploads",
        "--channel-col",
        "tenant",
        "--dedup-col",
        "file_id",
        "--batch-size",
        "100",
        "--cost",
        "3",
        "--slots",
        "2",
        "--progress-interval",
        "0.05",
        stdout=out,
    )
    call_command(
        "lonnymq_spark_export",
        "--input",
        path,
        "--queue",
        "uploads",
        "--channel-col",
        "tenant",
        "--dedup-col",
        "file_id",
        stdout=out,
    )

    lines = out.getvalue().splitlines()
    assert any("rows written" in line and "rows/s" in line for line in lines), lines
    summaries = [line for line in lines if line.startswith("Exported")]
    assert "1,000 rows seen, 1,000 enqueued, 0 duplicates" in summaries[0]
    assert "1,000 rows seen, 0 enqueued, 1,000 duplicates" in summaries[1]
    found = messages(dsn, "uploads")
    assert len(found) == 1000
    assert {(m["cost"], m["slots"]) for m in found} == {(3, 2)}  # --cost and --slots reach every message
    assert Counter(m["channel"] for m in found)[BIG_TENANT] == 500


@pytest.mark.django_db(transaction=True)
def test_the_management_command_reports_bad_input_as_a_command_error(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"tenant": "a", "n": 1}\n')

    with pytest.raises(CommandError, match=r"channel_col 'customer' is not a column"):
        call_command(
            "lonnymq_spark_export",
            "--input",
            str(path),
            "--queue",
            "q",
            "--channel-col",
            "customer",
            stdout=io.StringIO(),
        )


@pytest.mark.django_independent  # the spark-submit script runs without Django
@pytest.mark.slow  # starts its own JVM
@pytest.mark.django_db(transaction=True)
def test_the_spark_submit_script_runs_on_its_own(dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps({"tenant": f"t{i % 3}", "n": i}) + "\n" for i in range(30)))
    script = str(shared.ROOT / "example_project" / "spark_export_job.py")
    env = {**os.environ, "DATABASE_URL": shared.test_database_url(), "PYSPARK_PYTHON": sys.executable}

    done = subprocess.run(
        [
            sys.executable,
            script,
            "--input",
            str(path),
            "--queue",
            "jobs",
            "--channel-col",
            "tenant",
            "--master",
            "local[1]",
        ],
        cwd=shared.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert "30 rows seen, 30 enqueued, 0 duplicates" in done.stdout
    assert sorted(m["payload"]["n"] for m in messages(dsn, "jobs")) == list(range(30))

    refused = subprocess.run(
        [
            sys.executable,
            script,
            "--input",
            str(path),
            "--queue",
            "jobs",
            "--channel-col",
            "tenant",
            "--dsn",
            refused_dsn(password="hunter2-pw"),
        ],
        cwd=shared.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1
    assert "error: cannot connect to PostgreSQL at 127.0.0.1:" in refused.stderr
    assert "hunter2-pw" not in refused.stderr + refused.stdout


@pytest.mark.django_independent  # the spark-submit script runs without Django
def test_the_spark_submit_script_needs_a_database(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    done = subprocess.run(
        [
            sys.executable,
            str(shared.ROOT / "example_project" / "spark_export_job.py"),
            "--input",
            "x.parquet",
            "--queue",
            "q",
            "--channel-col",
            "c",
        ],
        cwd=shared.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--dsn or DATABASE_URL" in done.stderr
