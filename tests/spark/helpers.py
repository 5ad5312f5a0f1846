"""Read-backs and bad DSNs shared by the Spark tests."""

from __future__ import annotations

import socket
from typing import Any

import psycopg
from psycopg.rows import dict_row


def messages(dsn: str, queue: str) -> list[dict[str, Any]]:
    """Every message of ``queue`` with its channel name, in id order."""
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        return conn.execute(
            """SELECT m.id, c.name AS channel, m.payload, m.dedup_key, m.dequeue_at, m.max_attempts, m.cost, m.slots
                 FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
                WHERE c.queue = %s ORDER BY m.id""",
            (queue,),
        ).fetchall()


def refused_dsn(password: str = "s3cret-pw") -> str:
    """A DSN whose port nothing listens on (with a password that must never be printed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"host=127.0.0.1 port={port} dbname=nowhere user=someone password={password} connect_timeout=3"
