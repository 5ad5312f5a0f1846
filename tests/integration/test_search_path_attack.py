"""An unprivileged role that may create objects in ``public`` cannot get its code run by the app.

The attack as it was found: with PostgreSQL 14's default (CREATE on ``public`` for every
role), a role plants functions and operators whose argument types match the app's calls
better than the built-ins do (``public.%(bigint, integer)`` beats ``pg_catalog.%(bigint,
bigint)``; a concrete ``unnest(bigint[])`` beats the polymorphic built-in; an
``integer`` overload of one of the app's own functions beats the ``bigint`` original when
a caller passes a literal). The next time the app's (superuser) role runs a queue function,
the planted code runs with its privileges.

Here a role plants such look-alikes for every built-in function the queue's SQL calls, for
the operators on the types it uses, and for the app's own function names; each plant
raises ``planted ... ran``. The app then enqueues, dequeues, acks, fails, extends,
releases, reaps, requeues, cancels, runs now, purges, configures, deletes a channel and
reads stats: every call must succeed, i.e. nothing planted ran. A control query shows the
plants are live for an unpinned caller.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection
from psycopg import sql as pgsql

from django_lonnymq import api, enqueue, enqueue_many, sql
from django_lonnymq.api import Item
from django_lonnymq.models import TaskResultRecord
from tests.integration import helpers
from tests.testapp import tasks

pytestmark = pytest.mark.django_db(transaction=True)

SCALARS = ["bigint", "integer", "smallint", "numeric", "double precision", "text", "uuid", "jsonb", "boolean"]
ARRAYS = ["bigint[]", "integer[]", "text[]", "uuid[]", "jsonb[]", "boolean[]"]
OTHER = ["timestamp with time zone", "interval"]
OPERATORS = ["+", "-", "*", "/", "%", "||", "=", "<>", "<", ">", "<=", ">=", "~", "!~"]
# Signatures planted under each built-in name the queue's SQL calls.
SIGNATURES = [
    *([t] for t in SCALARS + ARRAYS),
    *([a, b] for a, b in itertools.product(["bigint", "integer", "text", "double precision"], repeat=2)),
    *([a, "bigint"] for a in ARRAYS),
    *([a, "integer"] for a in ARRAYS),
    ["text", "text", "text"],
    ["bigint[]", "bigint[]"],
    ["bigint[]", "integer[]"],
    ["text[]", "jsonb[]"],
    ["bigint[]", "uuid[]"],
]
CALLED = re.compile(r"(?<![\w.])([a-z_][a-z0-9_]*)\s*\(")
SYNTAX = {"coalesce", "greatest", "least", "nullif", "exists", "any", "in", "values", "filter", "over",
          "lateral", "conflict", "from", "as", "and", "or", "on", "join", "select", "where", "materialized"}  # fmt: skip


def builtins_called() -> set[str]:
    """Names of pg_catalog functions the live SQL calls."""
    names: set[str] = set()
    for definition in sql.functions(sql.read(sql.SCHEMA_FILE)).values():
        body = definition.split("$$")[1]
        code = "\n".join(line.split("--")[0] for line in body.splitlines())
        code = re.sub(r"'(?:[^']|'')*'", "''", code).replace("pg_catalog.", "")
        names |= {n.lower() for n in CALLED.findall(code)}
    found = {n for n in names - SYNTAX if not n.startswith("lonnymq_")}
    assert {"unnest", "array_agg", "nextval", "format", "pg_notify"} <= found  # the parse found them
    return found


@pytest.fixture
def attacker(dsn: str) -> Iterator[str]:
    """A role with CREATE on public (PostgreSQL 14's default) that plants look-alikes."""
    role = f"lq_attacker_{connection.settings_dict['NAME']}"[:63]
    admin = psycopg.connect(dsn, autocommit=True)
    ident = pgsql.Identifier(role)
    if _role_exists(admin, role):  # left over by an interrupted run
        admin.execute(pgsql.SQL("DROP OWNED BY {} CASCADE").format(ident))
    admin.execute(pgsql.SQL("DROP ROLE IF EXISTS {}").format(ident))
    admin.execute(pgsql.SQL("CREATE ROLE {} NOLOGIN").format(ident))
    admin.execute(pgsql.SQL("GRANT CREATE, USAGE ON SCHEMA public TO {}").format(ident))
    try:
        # In transactions of a few hundred statements: thousands of objects created in one
        # transaction would each hold a lock until its end, more than a server's shared lock
        # table holds (max_locks_per_transaction) when other databases are busy too.
        admin.execute(pgsql.SQL("SET ROLE {}").format(ident))
        chunked = _Chunked(admin)
        _plant(chunked)  # type: ignore[arg-type]
        chunked.finish()
        admin.execute("RESET ROLE")
        yield role
    finally:
        admin.execute("RESET ROLE")
        admin.execute(pgsql.SQL("DROP OWNED BY {} CASCADE").format(ident))
        admin.execute(pgsql.SQL("DROP ROLE {}").format(ident))
        admin.close()


class _Chunked:
    """An autocommit connection that groups its statements in transactions of ``size``."""

    def __init__(self, conn: psycopg.Connection, size: int = 300):
        self.conn, self.size, self.done = conn, size, 0

    def execute(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if self.done % self.size == 0:
            if self.done:
                self.conn.execute("COMMIT")
            self.conn.execute("BEGIN")
        self.done += 1
        result = self.conn.execute(*args, **kwargs)
        return result

    def finish(self) -> None:
        if self.done:
            self.conn.execute("COMMIT")


def _role_exists(conn: psycopg.Connection, role: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone() is not None


def _plant(conn: psycopg.Connection) -> None:
    counter = itertools.count()

    def plant(name: str, args: list[str], returns: str) -> None:
        arglist = ", ".join(args)
        body = f"BEGIN RAISE EXCEPTION 'planted {name}({arglist}) ran'; END"
        conn.execute(
            pgsql.SQL("CREATE FUNCTION public.{}({}) RETURNS {} LANGUAGE plpgsql AS {}").format(
                pgsql.Identifier(name), pgsql.SQL(arglist), pgsql.SQL(returns), pgsql.Literal(body)
            )
        )

    aggregates = ["array_agg", "count", "min", "max", "sum"]
    for name in sorted(builtins_called() - set(aggregates)):
        for args in SIGNATURES:
            returns = "bigint" if name not in {"unnest"} else "SETOF bigint"
            plant(name, args, returns)
    for name in aggregates:
        for t in ["bigint", "integer", "text", "uuid", "jsonb"]:
            fn = f"lq_evil_agg_{next(counter)}"
            plant(fn, [t, t], t)
            conn.execute(f"CREATE AGGREGATE public.{name}({t}) (SFUNC = public.{fn}, STYPE = {t})")
    types = SCALARS + ARRAYS + OTHER
    for op, (left, right) in itertools.product(OPERATORS, itertools.product(types, repeat=2)):
        fn = f"lq_evil_op_{next(counter)}"
        plant(fn, [left, right], "boolean" if op in {"=", "<>", "<", ">", "<=", ">=", "~", "!~"} else left)
        conn.execute(
            f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = public.{fn})"
        )
    # Overloads of the app's own functions where a caller might pass a narrower literal.
    rows = conn.execute(
        "SELECT p.proname, pg_get_function_identity_arguments(p.oid) FROM pg_proc p"
        " WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'lonnymq%%'"
    ).fetchall()
    for name, identity in rows:
        types_of = _split(identity)
        for narrower in ({"bigint": "integer"}, {"integer": "smallint", "bigint": "smallint"}):
            changed = [narrower.get(t, t) for t in types_of]
            if changed != types_of:
                plant(name, changed, "bigint")


def _split(identity: str) -> list[str]:
    """Argument types of ``pg_get_function_identity_arguments`` ("p_ids bigint[], p_n integer")."""
    return [part.strip().split(" ", 1)[1] for part in identity.split(",")] if identity else []


def test_planted_lookalikes_are_live_for_an_unpinned_caller(attacker):
    # The control: the same look-alikes catch an ordinary query on the app's connection.
    with pytest.raises(Exception, match="planted"), connection.cursor() as cursor:
        cursor.execute("SELECT 7::bigint % 3")
    with pytest.raises(Exception, match="planted"), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM unnest(ARRAY[1, 2]::bigint[])")


def test_nothing_planted_runs_through_the_queue(attacker, connect):
    # Enqueue, one and many (dedup keys, delays, priorities, several channels).
    first = enqueue("attack", {"n": 1}, channel="a", dedup_key="k1")
    assert enqueue("attack", {"n": 1}, channel="a", dedup_key="k1") == first
    ids = enqueue_many(
        "attack",
        [
            Item({"n": 2}, channel="a"),
            Item({"n": 3}, channel="b", dedup_key="k2"),
            Item({"n": 4}, channel="b", priority=5),
            Item({"n": 5}, channel="c", delay=3600),
        ],
    )
    assert len(ids) == 4
    # A Django Task: its message and result row in one call.
    task_result = tasks.add.enqueue(1, 2)
    assert TaskResultRecord.objects.get(id=task_result.id).status == "READY"
    api.configure_channel("attack", "a", max_concurrency=2)
    api.configure_channel("attack", "b", release_interval=0.0, paused=False)
    # Dequeue, ack, fail (retry and dead), extend, release.
    leased = helpers.dequeue("attack", 10)
    assert len(leased) >= 3
    helpers.extend(leased[:1], 60_000)
    assert helpers.ack(leased[:1]) == [leased[0]["id"]]
    assert helpers.fail(leased[1], "boom") == "retry"
    helpers.fail(leased[2], "gone", discard=True)
    helpers.release(leased[3:])
    # Reap an expired lease, requeue the dead one, run the scheduled one now, cancel, purge.
    again = helpers.dequeue("attack", 10)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE lonnymq_message SET lease_until = 1 WHERE id = %s", [again[0]["id"]])
    assert api.reap() >= 1
    assert api.requeue_dead([leased[2]["id"]]) == [leased[2]["id"]]
    assert api.run_now([ids[3]]) == [ids[3]]
    api.cancel([ids[3]])
    channel_b = helpers.channel_row("attack", "b")["id"]
    api.purge_channel(channel_b)
    # Stats, the health check's invariants, the history sampler, channel counts, delete.
    assert api.check() == []
    with connection.cursor() as cursor:
        for name, params in [
            ("queue_stats", {"queues": ["attack"]}),
            ("record_samples", {"keep_ms": 60_000}),
            ("record_samples_due", {"interval_ms": 1_000, "keep_ms": 60_000}),
            ("channel_counts", {"ids": [channel_b], "cap": 100}),
            ("next_due", {"queues": ["attack"]}),
            ("delete_channel", {"id": channel_b}),
        ]:
            cursor.execute(sql.query(name), params)
            cursor.fetchall()
    # Topics: a routed publish (keys, dedup, schedule), an unrouted one, subscriptions.
    from django_lonnymq.topics import (
        Event,
        publish,
        publish_many,
        subscribe,
        sync_subscriptions,
        unsubscribe_declared,
    )

    subscribe("attack.topic", queue="attack_b")
    try:
        assert sync_subscriptions() >= 1  # and any other declaration an imported handlers module made
    finally:
        unsubscribe_declared("attack.topic", "attack_b")
    published = publish_many("attack.topic", [Event({"n": 1}, key="a", dedup_key="d"), Event({"n": 2})])
    assert len(published) == 2 and len(published[0]) == 1
    assert publish("attack.nobody", {"n": 3}) == []
    # A worker's heartbeat row: registered, renamed when its name is taken, stopped, pruned.
    import uuid

    from django.utils import timezone

    with connection.cursor() as cursor:
        for instance in (uuid.uuid4(), uuid.uuid4()):
            cursor.execute(
                sql.query("worker_beat"),
                {"name": "attacker-w", "instance": str(instance), "host": "h", "pid": 1, "queues": ["attack"],
                 "concurrency": 1, "started_at": timezone.now(), "in_flight": 0, "processed": 0, "failed": 0,
                 "lost_after_ms": 30_000, "prune_after_ms": 60_000},
            )  # fmt: skip
        cursor.execute(
            sql.query("worker_stop"),
            {"name": "attacker-w", "instance": str(instance), "in_flight": 0, "processed": 0, "failed": 0},
        )
        cursor.fetchall()
