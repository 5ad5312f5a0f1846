"""The demo's Spark step: a skewed data set of uploads, one row per file, ready to export.

``generate_dataset(path)`` writes Parquet with columns ``tenant`` (the channel), ``file_id``
(unique, a natural dedup key), ``kind``, ``size_bytes`` and ``uploaded_at``. One tenant
(``tenant-0000``) holds half the rows; the other half is spread evenly over the rest, which
is what makes fairness visible when workers drain the queue.

    python example_project/spark_demo.py /tmp/uploads.parquet --rows 100000
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BIG_TENANT = "tenant-0000"
KINDS = ["pdf", "video", "image", "spreadsheet", "archive"]


def generate_dataset(
    path: str,
    rows: int = 100_000,
    tenants: int = 1000,
    *,
    partitions: int = 2,
    spark: SparkSession | None = None,
) -> int:
    """Write ``rows`` uploads over ``tenants`` tenants to ``path`` (Parquet, overwritten).

    Even row numbers belong to the big tenant; odd ones go round robin over the others.
    Deterministic: the same arguments write the same rows. Returns the number of rows.
    """
    if rows < 1 or tenants < 2:
        raise ValueError(f"need rows >= 1 and tenants >= 2, got rows={rows}, tenants={tenants}")
    from pyspark.sql import functions as sf

    from django_lonnymq.spark.cli import spark_session

    spark = spark or spark_session()
    width = max(4, len(str(tenants - 1)))
    ids = spark.range(0, rows, numPartitions=partitions)
    small = sf.lit(1) + (sf.floor(sf.col("id") / 2) % (tenants - 1)).cast("long")
    tenant_number = sf.when(sf.col("id") % 2 == 0, sf.lit(0).cast("long")).otherwise(small)
    kinds = sf.array(*[sf.lit(k) for k in KINDS])
    df = ids.select(
        sf.concat(sf.lit("tenant-"), sf.lpad(tenant_number.cast("string"), width, "0")).alias("tenant"),
        sf.concat(sf.lit("upload-"), sf.col("id").cast("string")).alias("file_id"),
        kinds[(sf.col("id") % len(KINDS)).cast("int")].alias("kind"),
        (sf.abs(sf.xxhash64(sf.col("id"))) % 50_000_000 + 1_000).alias("size_bytes"),
        sf.timestamp_seconds(sf.lit(1_717_200_000) + sf.col("id") % 86_400).alias(
            "uploaded_at"
        ),  # 2024-06-01 UTC
    )
    df.write.mode("overwrite").parquet(path)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the demo's skewed uploads data set (Parquet).")
    parser.add_argument("path")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=1000)
    args = parser.parse_args()
    n = generate_dataset(args.path, rows=args.rows, tenants=args.tenants)
    print(f"wrote {n:,} rows over {args.tenants:,} tenants ({BIG_TENANT} holds half) to {args.path}")


if __name__ == "__main__":
    main()
