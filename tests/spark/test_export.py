"""``export()`` with a real local SparkSession: exactly once in effect, retries, bad input."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from django_lonnymq import Item, enqueue_many
from django_lonnymq.spark import ExportError, ExportProgress, ExportResult, export
from django_lonnymq.spark.writer import Fault
from tests.spark.helpers import messages, refused_dsn

# django_independent: Spark and the writer import no Django (test_cli.py proves it); Django only makes
# the test database and enqueue_many seeds it (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.django_independent]

QUEUE = "reports"


def uploads(spark: Any, n: int = 1000, *, channels: int = 50, partitions: int = 2) -> Any:
    """``n`` rows over ``channels`` tenants: tenant, file_id, size, kind."""
    from pyspark.sql import functions as sf

    return spark.range(0, n, numPartitions=partitions).select(
        sf.concat(sf.lit("tenant-"), (sf.col("id") % channels).cast("string")).alias("tenant"),
        sf.concat(sf.lit("file-"), sf.col("id").cast("string")).alias("file_id"),
        (sf.col("id") * 7).alias("size"),
        sf.when(sf.col("id") % 3 == 0, sf.lit("pdf")).otherwise(sf.lit("video")).alias("kind"),
    )


def rows_in_queue(dsn: str) -> Counter[str]:
    return Counter(m["payload"]["file_id"] for m in messages(dsn, QUEUE))


def test_each_row_becomes_exactly_one_message_in_its_channel(spark: Any, dsn: str) -> None:
    result = export(uploads(spark), queue=QUEUE, channel_col="tenant", dsn=dsn, batch_size=100)

    assert result == ExportResult(rows_seen=1000, enqueued=1000, duplicates=0)
    found = messages(dsn, QUEUE)
    assert rows_in_queue(dsn) == Counter({f"file-{i}": 1 for i in range(1000)})
    assert Counter(m["channel"] for m in found) == Counter({f"tenant-{i}": 20 for i in range(50)})
    first = next(m for m in found if m["payload"]["file_id"] == "file-3")
    # Every other column, as JSON; the channel is the message's channel, not payload.
    assert first["payload"] == {"file_id": "file-3", "size": 21, "kind": "pdf"}
    assert first["channel"] == "tenant-3"
    # The derived key: "spark:" + the first 128 bits of sha256(export_id, channel, payload
    # JSON with sorted keys, run_at), fields separated by \x1f; no export_id, no run_at here.
    content = "\x1f".join(["", "tenant-3", '{"file_id":"file-3","kind":"pdf","size":21}', ""])
    assert first["dedup_key"] == "spark:" + hashlib.sha256(content.encode()).hexdigest()[:32]
    assert re.fullmatch(r"spark:[0-9a-f]{32}", first["dedup_key"])


def test_running_the_same_export_again_enqueues_nothing(spark: Any, dsn: str) -> None:
    df = uploads(spark)
    export(df, queue=QUEUE, channel_col="tenant", dsn=dsn, batch_size=250)

    again = export(df.repartition(3), queue=QUEUE, channel_col="tenant", dsn=dsn, batch_size=100)

    assert again == ExportResult(rows_seen=1000, enqueued=0, duplicates=1000)
    assert len(messages(dsn, QUEUE)) == 1000


def test_a_new_export_id_enqueues_the_same_rows_again(spark: Any, dsn: str) -> None:
    df = uploads(spark, 100)
    export(df, queue=QUEUE, channel_col="tenant", dsn=dsn, export_id="2024-06-01")

    later = export(df, queue=QUEUE, channel_col="tenant", dsn=dsn, export_id="2024-06-02")

    assert later.enqueued == 100
    assert len(messages(dsn, QUEUE)) == 200


def test_a_task_that_fails_after_committing_part_of_its_partition_is_retried_without_duplicates(
    spark: Any, dsn: str, tmp_path: Path
) -> None:
    marker = tmp_path / "fail-once"
    marker.touch()

    result = export(
        uploads(spark),
        queue=QUEUE,
        channel_col="tenant",
        dsn=dsn,
        batch_size=100,
        _fault=Fault(str(marker), after_chunks=2),
    )

    assert not marker.exists(), "no task failed: the test proved nothing"
    # The failed attempt committed 2 chunks of its partition; its retry found their keys taken.
    assert result == ExportResult(rows_seen=1000, enqueued=800, duplicates=200)
    assert rows_in_queue(dsn) == Counter({f"file-{i}": 1 for i in range(1000)})


def test_dedup_col_is_the_key_and_matches_keys_from_enqueue_many(spark: Any, dsn: str) -> None:
    enqueue_many(QUEUE, [Item(payload={"by": "django"}, channel="tenant-7", dedup_key="file-7")])
    df = uploads(spark, 100).unionByName(uploads(spark, 10))  # rows 0-9 twice

    result = export(df, queue=QUEUE, channel_col="tenant", dedup_col="file_id", dsn=dsn)

    assert result == ExportResult(rows_seen=110, enqueued=99, duplicates=11)
    found = messages(dsn, QUEUE)
    assert len(found) == 100
    assert {m["dedup_key"] for m in found} == {f"file-{i}" for i in range(100)}
    assert next(m for m in found if m["dedup_key"] == "file-7")["payload"] == {"by": "django"}


def test_payload_col_run_at_col_and_integer_channels(spark: Any, dsn: str) -> None:
    from pyspark.sql import functions as sf

    df = spark.range(0, 20, numPartitions=2).select(
        (sf.col("id") % 4).alias("tenant_id"),
        sf.struct(sf.col("id").alias("n"), sf.lit("x").alias("s")).alias("job"),
        sf.to_json(sf.struct(sf.col("id").alias("n"))).alias("job_text"),
        sf.when(sf.col("id") < 10, sf.timestamp_seconds(sf.lit(4_102_444_800))).alias("when"),
    )

    export(df, queue=QUEUE, channel_col="tenant_id", payload_col="job", run_at_col="when", dsn=dsn)
    export(df, queue="texts", channel_col="tenant_id", payload_col="job_text", dsn=dsn)

    found = messages(dsn, QUEUE)
    assert sorted(m["payload"]["n"] for m in found) == list(range(20))
    assert {m["channel"] for m in found} == {"0", "1", "2", "3"}
    scheduled = {m["payload"]["n"] for m in found if m["dequeue_at"] == 4_102_444_800_000}
    assert scheduled == set(range(10))
    assert sorted(m["payload"]["n"] for m in messages(dsn, "texts")) == list(range(20))


def test_progress_is_reported_while_it_runs_and_adds_up(spark: Any, dsn: str) -> None:
    seen: list[ExportProgress] = []

    export(
        uploads(spark),
        queue=QUEUE,
        channel_col="tenant",
        dsn=dsn,
        batch_size=50,
        on_progress=seen.append,
        progress_interval=0.05,
    )

    assert seen, "no progress was reported"
    assert [p.rows_written for p in seen] == sorted(p.rows_written for p in seen)
    assert (seen[-1].rows_written, seen[-1].enqueued) == (1000, 1000)


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------


def test_a_missing_column_is_named_before_anything_runs(spark: Any, dsn: str) -> None:
    with pytest.raises(
        ExportError,
        match=r"channel_col 'Tenant' is not a column of the data frame "
        r"\(did you mean 'tenant'\?\); its columns are: tenant, file_id",
    ):
        export(uploads(spark), queue=QUEUE, channel_col="Tenant", dsn=dsn)
    with pytest.raises(ExportError, match=r"dedup_col 'uuid' is not a column") as caught:
        export(uploads(spark), queue=QUEUE, channel_col="tenant", dedup_col="uuid", dsn=dsn)
    assert "did you mean" not in str(caught.value)  # nothing near: no guess
    # A spelling near miss, not only a different case (docs/spark.md promises the hint).
    with pytest.raises(
        ExportError,
        match=r"channel_col 'tenatn' is not a column of the data frame \(did you mean 'tenant'\?\)",
    ):
        export(uploads(spark), queue=QUEUE, channel_col="tenatn", dsn=dsn)
    with pytest.raises(ExportError, match=r"dedup_col 'file_di' .*\(did you mean 'file_id'\?\)"):
        export(uploads(spark), queue=QUEUE, channel_col="tenant", dedup_col="file_di", dsn=dsn)

    assert messages(dsn, QUEUE) == []


def test_a_null_channel_is_named_and_a_rerun_after_the_fix_enqueues_each_row_once(
    spark: Any, dsn: str
) -> None:
    from pyspark.sql import functions as sf

    good = uploads(spark)
    bad = good.withColumn(
        "tenant", sf.when(sf.col("file_id") == "file-777", None).otherwise(sf.col("tenant"))
    )

    with pytest.raises(
        ExportError,
        match=r"row \d+ of partition 1: column 'tenant' is null; every row needs "
        r"a channel \(payload .*file-777",
    ):
        export(bad, queue=QUEUE, channel_col="tenant", dsn=dsn, batch_size=100)

    partial = len(messages(dsn, QUEUE))
    assert 0 < partial < 1000  # chunks before the bad one committed; its own chunk did not
    fixed = export(good, queue=QUEUE, channel_col="tenant", dsn=dsn, batch_size=100)
    assert fixed == ExportResult(rows_seen=1000, enqueued=1000 - partial, duplicates=partial)
    assert rows_in_queue(dsn) == Counter({f"file-{i}": 1 for i in range(1000)})


def test_a_binary_column_is_not_json_serializable(spark: Any, dsn: str) -> None:
    from pyspark.sql import functions as sf

    df = uploads(spark, 10).withColumn("blob", sf.col("file_id").cast("binary"))

    with pytest.raises(
        ExportError,
        match=r"column 'blob' holds binary values, which are not JSON-serializable "
        r"\(encode it first",
    ):
        export(df, queue=QUEUE, channel_col="tenant", dsn=dsn)
    assert messages(dsn, QUEUE) == []


def test_a_payload_column_of_invalid_json_text_is_named(spark: Any, dsn: str) -> None:
    from pyspark.sql import functions as sf

    df = uploads(spark, 10, partitions=1).withColumn(
        "body", sf.when(sf.col("file_id") == "file-4", sf.lit("{not json")).otherwise(sf.lit('{"ok": true}'))
    )

    with pytest.raises(ExportError, match=r"row 4 of partition 0: column 'body' is not valid JSON"):
        export(df, queue=QUEUE, channel_col="tenant", payload_col="body", dsn=dsn)
    assert messages(dsn, QUEUE) == []


def test_a_payload_column_of_another_type_is_refused(spark: Any, dsn: str) -> None:
    with pytest.raises(
        ExportError,
        match=r"payload_col 'size' must hold JSON text \(string\) or a struct, map or "
        r"array, got bigint",
    ):
        export(uploads(spark, 10), queue=QUEUE, channel_col="tenant", payload_col="size", dsn=dsn)


def test_a_refused_connection_names_the_server_not_the_password(spark: Any, dsn: str) -> None:
    bad = refused_dsn(password="hunter2-pw")

    with pytest.raises(
        ExportError,
        match=r"cannot connect to PostgreSQL at 127\.0\.0\.1:\d+/nowhere as user "
        r"someone: .*refused",
    ) as caught:
        export(uploads(spark), queue=QUEUE, channel_col="tenant", dsn=bad)

    assert "hunter2-pw" not in str(caught.value)


def test_without_a_dsn_database_url_is_used_or_the_error_says_so(
    spark: Any, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(ExportError, match="no dsn given and DATABASE_URL is not set"):
        export(uploads(spark, 5), queue=QUEUE, channel_col="tenant")

    url = psycopg.conninfo.conninfo_to_dict(dsn)
    monkeypatch.setenv(
        "DATABASE_URL", f"postgresql://{url['user']}@{url['host']}:{url['port']}/{url['dbname']}"
    )
    assert export(uploads(spark, 5), queue=QUEUE, channel_col="tenant").enqueued == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"queue": ""}, r"queue must be a string of 1 to 100 characters"),
        ({"batch_size": 0}, r"batch_size must be an integer between 1 and 100000"),
        ({"max_attempts": 0}, r"max_attempts must be an integer between 1 and 1000"),
        ({"dedup_col": "file_id", "export_id": "x"}, r"export_id only goes into derived dedup keys"),
        ({"cost": 0}, r"cost must be an integer between 1 and 1000000, got 0"),
        ({"slots": 1.5}, r"slots must be an integer between 1 and 1000000, got 1.5"),
        ({"slots": True}, r"slots must be an integer between 1 and 1000000, got True"),
    ],
)
def test_bad_arguments(spark: Any, dsn: str, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ExportError, match=message):
        export(uploads(spark, 5), **{"queue": QUEUE, "channel_col": "tenant", "dsn": dsn, **kwargs})


@pytest.mark.parametrize(
    ("column", "bad_value", "message"),
    [
        ("tenant", "acme\x00corp", r"column 'tenant' contains a NUL character"),
        ("body", '{"name": "\\ud800"}', r"column 'body' contains a lone surrogate"),
        ("body", '{"score": NaN}', r"column 'body' contains NaN or Infinity"),
    ],
)
def test_values_postgresql_refuses_are_named_with_their_row(
    spark: Any, dsn: str, column: str, bad_value: str, message: str
) -> None:
    from pyspark.sql import functions as sf

    df = uploads(spark, 10, partitions=1).withColumn("body", sf.lit('{"ok": true}'))
    df = df.withColumn(
        column, sf.when(sf.col("file_id") == "file-4", sf.lit(bad_value)).otherwise(sf.col(column))
    )

    with pytest.raises(ExportError, match=r"row 4 of partition 0: " + message):
        export(df, queue=QUEUE, channel_col="tenant", payload_col="body", dsn=dsn)
    assert messages(dsn, QUEUE) == []
