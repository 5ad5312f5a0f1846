"""Spark fixtures: one local SparkSession for the whole test session.

``local[2,2]``: two cores, and a task may fail once and be retried (the second number is
``spark.task.maxFailures``; plain ``local[2]`` fails the job on the first task failure).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    # Executors' Python workers must be this interpreter (the venv with psycopg and the app).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("lonnymq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    # Several tests make tasks fail on purpose; their stack traces are noise.
    session.sparkContext.setLogLevel("FATAL")
    yield session
    session.stop()
