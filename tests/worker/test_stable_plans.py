"""The plans of the calls a worker makes for every batch do not depend on how big the tables
looked when they were made (migrations 0038 and 0039; docs/performance.md, "Plans made on a small
table"). A worker's generic plans last its session, until the table's next VACUUM or
ANALYZE: a dequeue or an ack planned while the message table held one row must still reach
messages through an index when it holds thousands, and a fan-out's ack must not match the
children to their counts in a nested loop (which read every child once per child).

The plans are the ones the session made and kept, read with auto_explain as they run.
"""

from __future__ import annotations

import re

import psycopg
import pytest

from bench.stable_plans import HELD_CALLS
from django_lonnymq import Workflow, api, sql

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "t_plans"


def plans_while(conn: psycopg.Connection, run, analyze: bool = False) -> str:  # type: ignore[no-untyped-def]
    """Every plan (nested statements included) executed while ``run(conn)`` runs, as text;
    with ``analyze``, each node says how many rows it read."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute(f"SET auto_explain.log_analyze = {'on' if analyze else 'off'}")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET client_min_messages = log")
    try:
        run(conn)
    finally:
        conn.execute("SET client_min_messages = notice")
        conn.execute("SET auto_explain.log_min_duration = -1")
    plans = "\n".join(n for n in notices if "plan:" in n)
    assert "Query Text" in plans, notices  # auto_explain did report
    return plans


def dequeue(conn: psycopg.Connection, batch: int) -> list[tuple]:
    return conn.execute(
        sql.query("dequeue"),
        {"queue": QUEUE, "batch_size": batch, "lease_ms": 60_000, "worker": "t", "tolerance_ms": 0},
    ).fetchall()


def vacuum_empty(conn: psycopg.Connection, *tables: str) -> None:
    """The tables as a drained queue's are after a VACUUM: empty, their size 0 pages."""
    for table in tables:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
    conn.execute(f"VACUUM {', '.join(tables)}")


def test_a_dequeue_and_an_ack_planned_on_a_one_row_table_use_the_index_on_thousands(connect):
    worker = connect()
    vacuum_empty(worker, "lonnymq_message")
    api.enqueue(QUEUE, {"n": 0})
    # Plans made now, on a table of one row: a dequeue that leases it, an ack that deletes it.
    leased = dequeue(worker, 50)
    assert len(leased) == 1
    assert worker.execute(sql.query("ack"), {"ids": [leased[0][0]], "tokens": [leased[0][8]]}).fetchone()[0]

    api.enqueue_many(QUEUE, [{"n": n} for n in range(5_000)])
    batch: list[tuple] = []

    def dequeue_and_ack(conn: psycopg.Connection) -> None:
        batch.extend(dequeue(conn, 50))
        conn.execute(sql.query("ack"), {"ids": [r[0] for r in batch], "tokens": [r[8] for r in batch]})

    plans = plans_while(worker, dequeue_and_ack)
    assert len(batch) == 50
    assert "lonnymq_message" in plans
    assert "Seq Scan on lonnymq_message" not in plans, plans


SCAN = re.compile(r"Scan[^\n]* on lonnymq_message [^\n]*actual time=\S+ rows=(\d+) loops=(\d+)")


def most_rows_read(plans: str) -> int:
    """The most rows any one scan of the message table returned, all its loops together."""
    read = [int(rows) * int(loops) for rows, loops in SCAN.findall(plans)]
    assert read, plans  # the message table was read
    return max(read)


def test_the_calls_on_held_messages_planned_on_a_one_row_table_read_only_those_on_thousands(connect):
    """The heartbeat, a retry, a discard, a snooze and a worker's release (migration 0039):
    planned while the table held one row, each read the whole table once it held thousands."""
    worker = connect()
    vacuum_empty(worker, "lonnymq_message")
    api.enqueue(QUEUE, {"n": 0})

    def lease_and(call, conn: psycopg.Connection) -> None:  # type: ignore[no-untyped-def]
        conn.execute("BEGIN")
        try:
            rows = dequeue(conn, 50)
            assert rows
            call(conn, rows)
        finally:
            conn.execute("ROLLBACK")

    # Past the five custom plans PostgreSQL makes before it keeps a generic one.
    for call in HELD_CALLS.values():
        for _ in range(7):
            lease_and(call, worker)
    api.enqueue_many(QUEUE, [{"n": n} for n in range(5_000)])
    for name, call in HELD_CALLS.items():
        plans = plans_while(worker, lambda conn, call=call: lease_and(call, conn), analyze=True)
        assert "Seq Scan on lonnymq_message" not in plans, (name, plans)
        assert most_rows_read(plans) <= 100, (name, plans)


def fan_out(width: int) -> int:
    flow = Workflow("plans", channel="t")
    root = flow.step(QUEUE, {}, name="root")
    parts = [flow.step(QUEUE, {}, after=[root], name=f"p{i}") for i in range(width)]
    flow.step(QUEUE, {}, after=parts, name="merge")
    return flow.start()


def run_through(conn: psycopg.Connection) -> None:
    """Lease and ack steps until none is left."""
    while leased := dequeue(conn, 1000):
        conn.execute(
            sql.query("workflow_ack"),
            {"ids": [r[0] for r in leased], "tokens": [r[8] for r in leased],
             "outputs": ["1"] * len(leased), "tolerance_ms": 0},
        )  # fmt: skip


def test_a_fan_out_ack_planned_on_small_tables_matches_children_without_a_nested_loop(connect):
    worker = connect()
    vacuum_empty(worker, "lonnymq_message", "lonnymq_workflow", "lonnymq_workflow_step")
    # Plans made on a workflow of five steps, the only one.
    small = fan_out(3)
    run_through(worker)
    assert api.workflow(small).state == "succeeded"
    worker.execute("DELETE FROM lonnymq_workflow")

    big = fan_out(500)
    [root] = dequeue(worker, 1000)
    released: list[int] = []

    def ack_root(conn: psycopg.Connection) -> None:
        released.extend(
            conn.execute(
                sql.query("workflow_ack"),
                {"ids": [root[0]], "tokens": [root[8]], "outputs": ["1"], "tolerance_ms": 0},
            ).fetchone()[0]
        )

    plans = plans_while(worker, ack_root)
    assert released == [root[0]]
    assert api.workflow(big).step("p499").state == "queued"
    # The statement that locks and counts the children, and the release it leads to.
    children = next(p for p in plans.split("Query Text:") if "FOR UPDATE OF s" in p)
    assert "lonnymq_workflow_step" in children
    assert "Nested Loop" not in children, children
    assert "Seq Scan on lonnymq_workflow_step" not in plans, plans
    run_through(worker)
    assert api.workflow(big).state == "succeeded"
