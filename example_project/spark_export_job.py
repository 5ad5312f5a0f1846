"""Enqueue one message per row of a data set: a spark-submit-able job with no Django in it.

    spark-submit example_project/spark_export_job.py \\
        --input s3://bucket/uploads/2024-06-01.parquet --queue transcode --channel-col tenant_id \\
        --dsn "postgresql://app@db:5432/app"        # or set DATABASE_URL

``python example_project/spark_export_job.py ...`` works too (local[*] unless --master).
Every node needs ``django-lonnymq`` installed (``pip install django-lonnymq[spark]``).
Exit status: 0 on success, 1 when the export was refused (the message says why), 2 on bad flags.
"""

from __future__ import annotations

import argparse
import os
import sys

from django_lonnymq.spark import ExportError
from django_lonnymq.spark.cli import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("DATABASE_URL"),
        help="libpq DSN or postgres:// URL (default: $DATABASE_URL)",
    )
    parser.add_argument("--max-attempts", type=int, default=5, help="deliveries before a message dies")
    options = vars(parser.parse_args(argv))
    if not options["dsn"]:
        parser.error("say where to enqueue: --dsn or DATABASE_URL")
    try:
        run(
            options,
            options["dsn"],
            lambda line: print(line, flush=True),
            max_attempts=options["max_attempts"],
        )
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
