"""Every statement of sql/stats.sql only reads: each runs in a READ ONLY transaction.

The operators' views read through stats.sql; their writes (deleting a channel, purging dead
messages, recording a sample) go through django_lonnymq.api and queries.sql.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_lonnymq import enqueue, sql

PARAMS = {
    "queue_stats": {"queues": None, "cap": 100_000},
    "channel_counts": {"ids": [1, 2], "cap": 100},
    "estimated_rows": {"table": "lonnymq_message"},
    "live_workers": {"lost_after_s": 30.0},
    "table_health": {"tables": ["lonnymq_message"]},
    "horizon_holders": {"limit": 5},
    "expired_leases": {"grace_ms": 1000},
    "queue_tenants": {"queue": "ro", "limit": 20, "cap": 100, "candidates": 1_000},
    "queue_health": {"cap": 100},
    "workflow_counts": {},
}


@pytest.mark.django_db
def test_every_stats_query_runs_in_a_read_only_transaction():
    enqueue("ro", {"n": 1})
    names = set(sql.queries("stats.sql"))
    assert names == set(PARAMS), f"give the new stats query {names - set(PARAMS)} its parameters here"
    for name, params in PARAMS.items():
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
            cursor.execute(sql.query(name), params)
            cursor.fetchall()


@pytest.mark.django_db
def test_a_writing_statement_fails_in_such_a_transaction():
    # The control: the same harness refuses a write (recording a sample).
    with (
        pytest.raises(Exception, match="read-only transaction"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("SET TRANSACTION READ ONLY")
        cursor.execute(sql.query("record_samples"), {"keep_ms": 60_000, "cap": 100_000})
