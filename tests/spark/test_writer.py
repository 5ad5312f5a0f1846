"""The partition writer with plain psycopg and no Spark: chunks, dedup counts, bad rows, faults."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from django_lonnymq import Item, enqueue_many
from django_lonnymq.spark import writer
from django_lonnymq.spark.writer import (
    Columns,
    ExportError,
    Fault,
    InjectedFaultError,
    WriterConfig,
    check_database,
    describe_dsn,
    write_rows,
)
from django_lonnymq.sql import binary_arrays, query
from tests.spark.helpers import messages, refused_dsn

# django_independent: the writer imports no Django (test_cli.py proves it); Django only makes the test
# database and enqueue_many seeds it (CONTRIBUTING.md)
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.django_independent]

QUEUE = "writer"
COLUMNS = Columns(channel="tenant", payload="payload", dedup="file_id")


def rows(n: int, *, channels: int = 7, start: int = 0) -> list[tuple[str, str, str, None]]:
    return [
        (f"tenant-{i % channels}", json.dumps({"row": i}), f"file-{i}", None) for i in range(start, start + n)
    ]


def config(dsn: str, **overrides: Any) -> WriterConfig:
    return WriterConfig(**{"dsn": dsn, "queue": QUEUE, "batch_size": 100, "columns": COLUMNS, **overrides})


def test_rows_become_messages_in_chunks_of_batch_size(dsn: str) -> None:
    counts = write_rows(config(dsn), rows(250))

    assert (counts.rows_seen, counts.enqueued, counts.duplicates) == (250, 250, 0)
    found = messages(dsn, QUEUE)
    assert sorted(m["payload"]["row"] for m in found) == list(range(250))
    assert {m["channel"] for m in found} == {f"tenant-{i}" for i in range(7)}
    assert all(m["dedup_key"] == f"file-{m['payload']['row']}" for m in found)
    with psycopg.connect(dsn) as conn:
        (transactions,) = conn.execute(
            "SELECT count(DISTINCT xmin::text) FROM lonnymq_message"
        ).fetchone() or (0,)
    assert transactions == 3  # one commit per chunk of 100


def test_writing_the_same_rows_again_enqueues_nothing(dsn: str) -> None:
    write_rows(config(dsn), rows(250))

    again = write_rows(config(dsn), rows(300))  # 250 old rows and 50 new ones

    assert (again.rows_seen, again.enqueued, again.duplicates) == (300, 50, 250)
    assert len(messages(dsn, QUEUE)) == 300


@pytest.mark.parametrize("mode", ["replace", "update"])
def test_with_a_mode_a_re_run_changes_the_waiting_messages_and_counts_none_as_new(
    dsn: str, mode: str
) -> None:
    write_rows(config(dsn, on_duplicate=mode), rows(150))
    changed = [(c, json.dumps({"row": i, "v": 2}), k, r) for i, (c, _, k, r) in enumerate(rows(150))]

    again = write_rows(config(dsn, on_duplicate=mode), changed + rows(10, start=1000))

    assert (again.rows_seen, again.enqueued, again.duplicates) == (160, 10, 150)
    found = messages(dsn, QUEUE)
    assert len(found) == 160
    assert sorted(m["payload"]["row"] for m in found if m["payload"].get("v") == 2) == list(range(150))


def test_a_key_repeated_in_one_chunk_or_across_chunks_is_one_message(dsn: str) -> None:
    data = rows(10) + [("tenant-3", '{"again": 3}', "file-3", None)] + rows(100, start=500)
    data.append(("tenant-3", '{"again": 3}', "file-3", None))  # in the second chunk

    counts = write_rows(config(dsn), data)

    assert (counts.rows_seen, counts.enqueued, counts.duplicates) == (112, 110, 2)
    found = [m for m in messages(dsn, QUEUE) if m["dedup_key"] == "file-3"]
    assert [m["payload"] for m in found] == [{"row": 3}]


def test_keys_taken_by_enqueue_many_or_by_acked_messages_count_as_duplicates(dsn: str) -> None:
    enqueue_many(QUEUE, [Item(payload={"row": 1}, channel="tenant-1", dedup_key="file-1")])
    write_rows(config(dsn), rows(5, start=100))
    with psycopg.connect(dsn) as conn:  # as if workers had acked them: the keys outlive them
        conn.execute("DELETE FROM lonnymq_message WHERE dedup_key IN ('file-100', 'file-101')")

    counts = write_rows(config(dsn), rows(2, channels=7, start=0) + rows(5, start=100))

    assert (counts.rows_seen, counts.enqueued, counts.duplicates) == (7, 1, 6)  # only file-0 is new
    assert sorted(m["dedup_key"] for m in messages(dsn, QUEUE)) == [
        "file-0",
        "file-1",
        "file-102",
        "file-103",
        "file-104",
    ]


def test_run_at_and_max_attempts_reach_the_messages(dsn: str) -> None:
    data = [("t", '{"a": 1}', "k1", 4_102_444_800_000), ("t", '{"a": 2}', "k2", None)]

    write_rows(config(dsn, default_max_attempts=9, columns=Columns(run_at="when")), data)

    first, second = messages(dsn, QUEUE)
    assert first["dequeue_at"] == 4_102_444_800_000  # 2100-01-01: scheduled
    assert second["dequeue_at"] < 4_102_444_800_000  # now
    assert first["max_attempts"] == second["max_attempts"] == 9


def test_the_export_cost_reaches_every_message_and_a_cost_past_the_bucket_is_refused(dsn: str) -> None:
    write_rows(config(dsn, cost=7), [("t", '{"a": 1}', "k1", None), ("u", '{"a": 2}', "k2", None)])
    assert [m["cost"] for m in messages(dsn, QUEUE)] == [7, 7]

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT lonnymq_configure_queue_v1(%s, NULL, false, 5, 60000, 5, false)", [QUEUE])
    with pytest.raises(ExportError, match="must be at most the burst of queue"):
        write_rows(config(dsn, cost=7), [("t", '{"a": 3}', "k3", None)])
    assert len(messages(dsn, QUEUE)) == 2


def test_the_export_slots_reach_every_message_and_slots_past_a_cap_are_refused(dsn: str) -> None:
    write_rows(config(dsn, slots=3), [("t", '{"a": 1}', "k1", None), ("u", '{"a": 2}', "k2", None)])
    assert [m["slots"] for m in messages(dsn, QUEUE)] == [3, 3]

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT lonnymq_configure_queue_v1(%s, 2, false, NULL, NULL, NULL, false)", [QUEUE])
    with pytest.raises(ExportError, match="must be at most the max_concurrency of queue"):
        write_rows(config(dsn, slots=3), [("t", '{"a": 3}', "k3", None)])
    assert len(messages(dsn, QUEUE)) == 2


def test_an_empty_input_opens_no_connection(dsn: str) -> None:
    counts = write_rows(config(refused_dsn()), [])

    assert (counts.rows_seen, counts.enqueued) == (0, 0)


# ---------------------------------------------------------------------------------------
# Bad rows: a clear error naming the column and the row; earlier chunks stay committed and
# a re-run after the fix enqueues each row exactly once.
# ---------------------------------------------------------------------------------------


def test_a_null_channel_names_the_column_and_row_and_writes_nothing_of_its_chunk(dsn: str) -> None:
    data = rows(250)
    data[150] = (None, data[150][1], data[150][2], None)  # type: ignore[assignment]

    with pytest.raises(ExportError, match=r"row 150 of the input: column 'tenant' is null") as caught:
        write_rows(config(dsn), data)

    assert caught.value.column == "tenant"
    assert sorted(m["payload"]["row"] for m in messages(dsn, QUEUE)) == list(range(100))  # chunk 1 only
    fixed = write_rows(config(dsn), rows(250))
    assert (fixed.enqueued, fixed.duplicates) == (150, 100)
    assert sorted(m["payload"]["row"] for m in messages(dsn, QUEUE)) == list(range(250))


@pytest.mark.parametrize(
    ("bad_row", "column", "message"),
    [
        (("t", '{"a": ', "k", None), "payload", r"column 'payload' is not valid JSON"),
        (("t", '{"a": "\\u0000"}', "k", None), "payload", r"contains a NUL character"),
        (("t", None, "k", None), "payload", r"column 'payload' is null"),
        (
            ("t", json.dumps({"a": "x" * 2000}), "k", None),
            "payload",
            r"bytes as JSON, more than the limit of 1000",
        ),
        (("t", "{}", None, None), "file_id", r"column 'file_id' is null; every row needs a dedup key"),
        (("t", "{}", "k" * 201, None), "file_id", r"column 'file_id' must be 1 to 200 characters"),
        (("t" * 201, "{}", "k", None), "tenant", r"column 'tenant' must be 1 to 200 characters"),
        (("t\x00x", "{}", "k", None), "tenant", r"column 'tenant' contains a NUL character"),
        (("t\ud800", "{}", "k", None), "tenant", r"column 'tenant' contains a lone surrogate"),
        (("t", '{"a": "\\ud800"}', "k", None), "payload", r"contains a lone surrogate"),
        (("t", '{"a": "\ud800"}', "k", None), "payload", r"contains a lone surrogate"),
        (("t", '{"a": NaN}', "k", None), "payload", r"contains NaN or Infinity"),
        (("t", '{"a": -Infinity}', "k", None), "payload", r"contains NaN or Infinity"),
        (("t", "[" * 102 + "]" * 102, "k", None), "payload", r"column 'payload' is nested 101 levels deep"),
        (("t", '{"a":' * 160 + "1" + "}" * 160, "k", None), "payload", r"nested 160 levels deep, more than"),
    ],
)
def test_bad_rows_are_refused_with_their_column(
    dsn: str, bad_row: tuple[Any, ...], column: str, message: str
) -> None:
    data = rows(5) + [bad_row] + rows(5, start=5)

    with pytest.raises(ExportError, match=message) as caught:
        write_rows(config(dsn, max_payload_bytes=1000), data)

    assert caught.value.column == column
    assert "row 5 of the input" in str(caught.value)
    assert messages(dsn, QUEUE) == []  # the whole chunk rolled back


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_a_payload_past_8_mib_as_stored_is_refused_with_its_column(dsn: str) -> None:
    """1.4 MB of JSON, within the limit, but 8,400,008 bytes as jsonb: past the schema's CHECK."""
    data = rows(5) + [("t", "[" + ",".join(["1"] * 700_000) + "]", "k", None)] + rows(5, start=5)

    with pytest.raises(ExportError, match=r"takes 8400008 bytes as stored by PostgreSQL") as caught:
        write_rows(config(dsn, max_payload_bytes=8_388_608), data)

    assert caught.value.column == "payload"
    assert "row 5 of the input" in str(caught.value)
    assert messages(dsn, QUEUE) == []  # the whole chunk rolled back


def test_a_payload_at_the_depth_bound_is_written(dsn: str) -> None:
    at_bound = "[" * 101 + "]" * 101  # the innermost list is at level 100
    counts = write_rows(config(dsn), rows(3) + [("t", at_bound, "deep", None)])
    assert counts.enqueued == 4


def test_a_row_the_enqueue_function_refuses_is_named_by_its_row_and_column(dsn: str) -> None:
    # The writer's own checks come first; this is how a row the SQL function refuses reads
    # (here one nested too deep, sent straight to lonnymq_enqueue_many_v4).
    chunk = rows(3) + [("t", "[" * 151 + "]" * 151, "deep", None)]
    params = {
        "queue": QUEUE, "channels": [r[0] for r in chunk], "payloads": [r[1] for r in chunk], "run_at_ms": None,
        "delay_ms": None, "priorities": None, "dedup_keys": [r[2] for r in chunk], "on_duplicate": None, "max_attempts": None,
        "default_max_attempts": 5, "priority_step_ms": 1000, "tolerance_ms": 50, "costs": None, "slots": None,
    }  # fmt: skip
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as refused:
        conn.execute(binary_arrays(query("enqueue_many")), params)

    explained = writer._explain(refused.value, config(dsn), chunk, 200, "partition 4")

    assert isinstance(explained, ExportError) and explained.column == "payload"
    assert str(explained).startswith(
        "row 203 of partition 4: column 'payload' must be nested at most 100 levels deep (the root is "
        "level 0), got 150 levels (payload [[[["
    )
    assert messages(dsn, QUEUE) == []


# ---------------------------------------------------------------------------------------
# The database
# ---------------------------------------------------------------------------------------


def test_a_refused_connection_names_host_and_port_but_not_the_password() -> None:
    bad = refused_dsn(password="hunter2-pw")

    with pytest.raises(ExportError) as caught:
        write_rows(config(bad), rows(3))

    text = str(caught.value)
    assert text.startswith(f"cannot connect to PostgreSQL at {describe_dsn(bad)}")
    assert "127.0.0.1:" in text and "/nowhere as user someone" in text
    assert "hunter2-pw" not in text


def test_describe_dsn_reads_urls_without_their_password() -> None:
    assert describe_dsn("postgres://app:pw@db.internal:6543/jobs") == "db.internal:6543/jobs as user app"


def test_a_database_without_the_schema_is_refused_before_anything_runs(dsn: str) -> None:
    other_database = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")

    with pytest.raises(
        ExportError, match=r"has no lonnymq_enqueue_many_v4 function; run `python manage.py migrate`"
    ):
        check_database(other_database)


# ---------------------------------------------------------------------------------------
# Failures mid-partition, concurrency, progress
# ---------------------------------------------------------------------------------------


def test_a_writer_that_dies_after_committing_a_chunk_is_safe_to_run_again(dsn: str, tmp_path: Path) -> None:
    marker = tmp_path / "fail-once"
    marker.touch()
    faulty = config(dsn, fault=Fault(str(marker), after_chunks=2))

    with pytest.raises(InjectedFaultError):
        write_rows(faulty, rows(350))

    assert not marker.exists()
    assert len(messages(dsn, QUEUE)) == 200
    retry = write_rows(faulty, rows(350))  # the marker is gone: this attempt runs to the end
    assert (retry.rows_seen, retry.enqueued, retry.duplicates) == (350, 150, 200)
    assert sorted(m["payload"]["row"] for m in messages(dsn, QUEUE)) == list(range(350))


def test_concurrent_writers_over_the_same_channels_in_any_order_enqueue_each_key_once(dsn: str) -> None:
    data = rows(600, channels=40)
    orders = [random.Random(seed).sample(data, len(data)) for seed in range(4)]
    results: list[Any] = [None] * len(orders)

    def work(index: int) -> None:
        try:
            results[index] = write_rows(config(dsn, batch_size=50), orders[index])
        except BaseException as exc:  # reported below
            results[index] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(orders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not any(isinstance(r, BaseException) for r in results), results
    assert sum(r.enqueued for r in results) == 600  # every key created by exactly one writer
    assert sum(r.duplicates for r in results) == 3 * 600
    found = messages(dsn, QUEUE)
    assert sorted(m["payload"]["row"] for m in found) == list(range(600))


def test_each_committed_chunk_notifies_its_counts(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN lonnymq_spark_test_progress")
        write_rows(config(dsn, progress_channel="lonnymq_spark_test_progress"), rows(250))
        write_rows(config(dsn, progress_channel="lonnymq_spark_test_progress"), rows(120))
        payloads = [n.payload for n in listener.notifies(timeout=2, stop_after=5)]

    assert payloads == ["100 100", "100 100", "50 50", "100 0", "20 0"]
