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

A second role plants look-alikes of every queue function a named statement calls: one
argument fewer or one more with a default (a call that leaves an argument to its default
would tie with them: AmbiguousFunction, which stopped every worker at its dequeue), and
looser argument types. Every named statement still calls the real function.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg import sql as pgsql

from django_lonnymq import api, enqueue, enqueue_many, sql
from django_lonnymq.api import Item
from django_lonnymq.models import TaskResultRecord
from tests.harness import helpers
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
    with _planting_role(dsn, "lq_attacker", _plant) as role:
        yield role


@contextlib.contextmanager
def _planting_role(dsn: str, prefix: str, plant: Callable[[psycopg.Connection], None]) -> Iterator[str]:
    """A role that may create in public runs ``plant``; what it created is dropped afterwards."""
    role = f"{prefix}_{connection.settings_dict['NAME']}"[:63]
    admin = psycopg.connect(dsn, autocommit=True)
    ident = pgsql.Identifier(role)
    if _role_exists(admin, role):  # left over by an interrupted run
        _drop_owned(admin, role)
    admin.execute(pgsql.SQL("DROP ROLE IF EXISTS {}").format(ident))
    admin.execute(pgsql.SQL("CREATE ROLE {} NOLOGIN").format(ident))
    admin.execute(pgsql.SQL("GRANT CREATE, USAGE ON SCHEMA public TO {}").format(ident))
    try:
        # In transactions of a few hundred statements: thousands of objects created in one
        # transaction would each hold a lock until its end, more than a server's shared lock
        # table holds (max_locks_per_transaction) when other databases are busy too.
        admin.execute(pgsql.SQL("SET ROLE {}").format(ident))
        chunked = _Chunked(admin)
        plant(chunked)  # type: ignore[arg-type]
        chunked.finish()
        admin.execute("RESET ROLE")
        yield role
    finally:
        admin.execute("RESET ROLE")
        _drop_owned(admin, role)
        admin.execute(pgsql.SQL("DROP ROLE {}").format(ident))
        admin.close()


def _drop_owned(admin: psycopg.Connection, role: str) -> None:
    """Drop what ``role`` planted in transactions of a few hundred objects (one ``DROP OWNED``
    would lock them all at once: more than the shared lock table holds on a busy server),
    then ``DROP OWNED`` for its grants and anything left."""
    drops = admin.execute(
        "SELECT format('DROP OPERATOR IF EXISTS %%s CASCADE', o.oid::regoperator) FROM pg_operator o"
        " WHERE o.oprowner = %(role)s::regrole"
        " UNION ALL"
        " SELECT format('DROP ROUTINE IF EXISTS %%s CASCADE', p.oid::regprocedure) FROM pg_proc p"
        " WHERE p.proowner = %(role)s::regrole AND p.prokind = 'a'"
        " UNION ALL"
        " SELECT format('DROP ROUTINE IF EXISTS %%s CASCADE', p.oid::regprocedure) FROM pg_proc p"
        " WHERE p.proowner = %(role)s::regrole AND p.prokind <> 'a'",
        {"role": role},
    ).fetchall()
    chunked = _Chunked(admin)
    for (drop,) in drops:
        chunked.execute(drop)
    chunked.finish()
    admin.execute(pgsql.SQL("DROP OWNED BY {} CASCADE").format(pgsql.Identifier(role)))


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


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
def test_planted_lookalikes_are_live_for_an_unpinned_caller(attacker):
    # The control: the same look-alikes catch an ordinary query on the app's connection.
    with pytest.raises(Exception, match="planted"), connection.cursor() as cursor:
        cursor.execute("SELECT 7::bigint % 3")
    with pytest.raises(Exception, match="planted"), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM unnest(ARRAY[1, 2]::bigint[])")


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
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
            ("queue_stats", {"queues": ["attack"], "cap": 1}),
            ("record_samples", {"keep_ms": 60_000, "cap": 100_000}),
            ("record_samples_due", {"interval_ms": 1_000, "keep_ms": 60_000, "cap": 100_000}),
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


# ---------------------------------------------------------------------------------------
# Look-alikes of the queue's own functions: every named statement passes every argument
# ---------------------------------------------------------------------------------------

CALL = re.compile(r"\b(lonnymq_\w+)\s*\(")
# Looser types a look-alike may take instead of the real ones.
LOOSER = {
    "bigint": "numeric", "integer": "numeric", "smallint": "numeric", "bigint[]": "numeric[]",
    "integer[]": "numeric[]", "uuid": "text", "uuid[]": "text[]", "jsonb": "text", "jsonb[]": "text[]",
    "boolean": "text", "timestamp with time zone": "text", "regclass": "text",
}  # fmt: skip


def functions_the_statements_call(conn: psycopg.Connection) -> dict[str, tuple[list[str], int]]:
    """Every queue function a named statement calls: its argument types and how many have defaults."""
    called = {name for text in sql.queries().values() for name in CALL.findall(text)}
    rows = conn.execute(
        "SELECT p.proname, ARRAY(SELECT format_type(a.t, NULL) FROM unnest(p.proargtypes::oid[])"
        "                        WITH ORDINALITY AS a(t, n) ORDER BY a.n), p.pronargdefaults"
        "  FROM pg_proc p"
        " WHERE p.proname = ANY (%s) AND p.pronamespace = current_schema()::regnamespace"
        "   AND p.proowner = (SELECT relowner FROM pg_class WHERE oid = 'lonnymq_message'::regclass)",
        [sorted(called)],
    ).fetchall()
    return {name: (list(types), defaults) for name, types, defaults in rows}


def statement_calls(text: str) -> Iterator[tuple[str, int]]:
    """(function, number of arguments passed) for each queue-function call in a statement."""
    for match in CALL.finditer(text):
        depth, commas, position, empty = 1, 0, match.end(), True
        while depth:
            char = text[position]
            depth += {"(": 1, ")": -1}.get(char, 0)
            commas += char == "," and depth == 1
            empty = empty and (char.isspace() or depth == 0)
            position += 1
        yield match[1], 0 if empty else commas + 1


def lookalikes(real: dict[str, tuple[list[str], int]]) -> list[tuple[str, list[str]]]:
    """Overloads another role could plant beside each function: the first k arguments and one
    more with a default (of another type), fewer arguments where the real ones have defaults,
    and the arguments as looser types."""
    taken = {(name, tuple(types)) for name, (types, _) in real.items()}
    planted: list[tuple[str, list[str]]] = []

    def add(name: str, types: list[str]) -> None:
        if (name, tuple(types)) not in taken:
            taken.add((name, tuple(types)))
            planted.append((name, types))

    for name, (types, defaults) in sorted(real.items()):
        for k in range(len(types)):
            extra = "interval" if types[k] != "interval" else "point"
            add(name, [*types[:k], f"{extra} DEFAULT NULL"])
        for k in range(len(types) - defaults, len(types)):
            add(name, types[:k])
        add(name, [LOOSER.get(t, t) for t in types])
        add(name, ["text"] * len(types))
    return planted


def _plant_lookalikes(conn: psycopg.Connection) -> None:
    for name, types in lookalikes(functions_the_statements_call(conn)):
        arglist = ", ".join(types)
        body = f"BEGIN RAISE EXCEPTION 'planted {name}({arglist}) ran'; END"
        conn.execute(
            pgsql.SQL("CREATE FUNCTION public.{}({}) RETURNS bigint LANGUAGE plpgsql AS {}").format(
                pgsql.Identifier(name), pgsql.SQL(arglist), pgsql.Literal(body)
            )
        )


@pytest.fixture
def lookalike_planter(dsn: str) -> Iterator[str]:
    with _planting_role(dsn, "lq_lookalikes", _plant_lookalikes) as role:
        yield role


def test_every_named_statement_passes_every_argument_of_the_functions_it_calls(connect):
    real = functions_the_statements_call(connect())
    assert {"lonnymq_dequeue_v1", "lonnymq_enqueue_v4", "lonnymq_now_ms_v1"} <= set(real)
    short = [
        f"{statement}: {function} gets {passed} of {len(real[function][0])} arguments"
        for statement, text in sql.queries().items()
        for function, passed in statement_calls(text)
        if function in real and passed != len(real[function][0])
    ]
    assert short == []


def _statements(ids: dict[str, Any]) -> list[tuple[str, Any]]:
    """Parameters for each named statement that calls a queue function, in an order where
    each finds what the ones before made (``ids`` fills in as they run)."""
    from django.utils import timezone

    q, step = "lookalike", {"priority_step_ms": 1000, "tolerance_ms": 50}
    one = {"queue": q, "channel": "a", "payload": '{"n": 1}', "run_at_ms": None, "delay_ms": None, "priority": 0,
           "dedup_key": None, "on_duplicate": "skip", "max_attempts": 5, "cost": 1, "slots": 1, **step}  # fmt: skip
    many = {"queue": q, "channels": ["a", "b", "b"], "payloads": ["1", "2", "3"], "run_at_ms": None,
            "delay_ms": None, "priorities": None, "dedup_keys": None, "on_duplicate": None, "max_attempts": None,
            "default_max_attempts": 5, "costs": None, "slots": None, **step}  # fmt: skip
    task = {"result_id": str(uuid.uuid4()), "backend": "default", "task": "tests.testapp.tasks.add",
            "args": [1, 2], "kwargs": {}}  # fmt: skip
    worker = {"name": "lookalike-w", "instance": str(uuid.uuid4())}
    # fmt: off
    return [
        ("enqueue", one),
        ("enqueue_traced", {**one, "context": "{}"}),
        ("enqueue_many", many),
        ("enqueue_many_traced", {**many, "context": "{}"}),
        ("enqueue_task", {"queue": "default", "channel": "t", "payload": json.dumps(task), "run_at_ms": None,
                          "priority": 0, "max_attempts": 3, "run_after": None, "enqueued_at": timezone.now(),
                          **step}),
        ("enqueue_task_keyed", {"queue": "default", "channel": "t",
                                "payload": json.dumps({**task, "result_id": str(uuid.uuid4())}), "run_at_ms": None,
                                "priority": 0, "max_attempts": 3, "run_after": None, "enqueued_at": timezone.now(),
                                "dedup_key": "k", "on_duplicate": "replace", **step}),
        ("configure_channel", {"queue": q, "channel": "a", "max_concurrency": 50, "unlimited": False,
                               "release_interval_ms": None, "paused": None, "weight": None, "rate_count": None,
                               "rate_period_ms": None, "rate_burst": None, "no_rate": False,
                               "plan": None, "no_plan": False, "inherit": []}),
        ("configure_plan", {"name": "lookalike_plan", "weight": 2, "max_concurrency": 5, "unlimited": False,
                            "release_interval_ms": None, "rate_count": None, "rate_period_ms": None,
                            "rate_burst": None, "no_rate": False, "ordered": None}),
        ("configure_channel", {"queue": q, "channel": "planned", "max_concurrency": None, "unlimited": False,
                               "release_interval_ms": None, "paused": None, "weight": None, "rate_count": None,
                               "rate_period_ms": None, "rate_burst": None, "no_rate": False,
                               "plan": "lookalike_plan", "no_plan": False, "inherit": ["weight"]}),
        ("configure_plan", {"name": "lookalike_plan", "weight": 3, "max_concurrency": None, "unlimited": True,
                            "release_interval_ms": 10, "rate_count": 5, "rate_period_ms": 1000,
                            "rate_burst": 5, "no_rate": False, "ordered": False}),
        ("configure_queue_plan", {"queue": "lookalike_planned", "max_concurrency": None, "unlimited": False,
                                  "rate_count": None, "rate_period_ms": None, "rate_burst": None,
                                  "no_rate": False, "plan": "lookalike_plan"}),
        ("configure_plan", {"name": "lookalike_unused", "weight": None, "max_concurrency": None,
                            "unlimited": False, "release_interval_ms": None, "rate_count": None,
                            "rate_period_ms": None, "rate_burst": None, "no_rate": False, "ordered": True}),
        ("delete_plan", {"name": "lookalike_unused"}),
        ("configure_queue", {"queue": "lookalike_other", "max_concurrency": 10, "unlimited": False,
                             "rate_count": None, "rate_period_ms": None, "rate_burst": None, "no_rate": False}),
        ("configure_channel", {"queue": q, "channel": "rated", "max_concurrency": None, "unlimited": False,
                               "release_interval_ms": None, "paused": None, "weight": None, "rate_count": 5,
                               "rate_period_ms": 1000, "rate_burst": 5, "no_rate": False,
                               "plan": None, "no_plan": False, "inherit": []}),
        ("consume", {"queue": q, "channel": "rated", "tokens": 1}),
        ("dequeue", {"queue": q, "batch_size": 10, "lease_ms": 60_000, "worker": "w", "tolerance_ms": 50}),
        ("extend", lambda: {"ids": ids["leased"][:1], "tokens": ids["tokens"][:1], "lease_ms": 60_000}),
        ("ack", lambda: {"ids": ids["leased"][:1], "tokens": ids["tokens"][:1]}),
        ("fail", lambda: {"id": ids["leased"][1], "token": ids["tokens"][1], "error": "boom", "retry_delay_ms": None,
                          "reason": "discarded", "backoff_base_ms": 1000, "backoff_max_ms": 60_000,
                          "tolerance_ms": 50}),
        ("step_save", lambda: {"id": ids["leased"][-1], "token": ids["tokens"][-1], "name": "s", "result": "1"}),
        ("durable_pause", lambda: {"id": ids["leased"][-1], "token": ids["tokens"][-1], "name": "w", "key": "k",
                                   "delay_ms": None}),
        ("suspend", lambda: {"id": ids["leased"][-1], "token": ids["tokens"][-1], "name": "w", "tolerance_ms": 50}),
        ("emit_event", {"key": "k", "payload": "1", "tolerance_ms": 50}),
        ("resume", lambda: {"ids": ids["leased"][-1:], "tolerance_ms": 50}),
        ("forget_steps", lambda: {"id": ids["leased"][-1], "name": "s"}),
        ("durable_prune", {"event_retention_ms": 86_400_000, "limit": 10}),
        ("snooze", lambda: {"id": ids["leased"][2], "token": ids["tokens"][2], "delay_ms": 1000,
                            "max_snoozes": 100, "backoff_base_ms": 1000, "backoff_max_ms": 60_000,
                            "tolerance_ms": 50}),
        ("release", lambda: {"ids": ids["leased"][2:], "tokens": ids["tokens"][2:], "tolerance_ms": 50}),
        ("pause_queue", {"queue": "lookalike_paused", "paused": True}),
        ("reap", {"limit": 100, "dedup_window_ms": 86_400_000, "tolerance_ms": 50}),
        ("prune_channels", {"idle_ms": 86_400_000, "limit": 10}),
        ("requeue_dead", lambda: {"ids": [ids["leased"][1]], "reset_attempts": True, "tolerance_ms": 50}),
        ("run_now", lambda: {"ids": [ids["leased"][1]], "tolerance_ms": 50}),
        ("cancel", lambda: {"ids": [ids["leased"][1]], "missing_ok": False}),
        ("purge_dead", {"ids": []}),
        ("channel_counts", lambda: {"ids": ids["channels"], "cap": 100}),
        ("purge_channel", lambda: {"channel_id": ids["channels"][-1]}),
        ("delete_channel", lambda: {"id": ids["channels"][-1]}),
        ("record_samples", {"keep_ms": 60_000, "cap": 1}),
        ("record_samples_due", {"interval_ms": 1_000, "keep_ms": 60_000, "cap": 1}),
        ("check", {"grace_ms": 1_000}),
        ("next_due", {"queues": [q]}),
        ("pending", {"queues": [q]}),
        ("worker_beat", {**worker, "host": "h", "pid": 1, "queues": [q], "concurrency": 1,
                         "started_at": timezone.now(), "in_flight": 0, "processed": 0, "failed": 0,
                         "lost_after_ms": 30_000, "prune_after_ms": 60_000}),
        ("worker_stop", {**worker, "in_flight": 0, "processed": 0, "failed": 0}),
        ("subscribe", {"topics": ["lookalike.topic"], "queues": ["lookalike_group"]}),
        ("publish", {"topic": "lookalike.topic", "keys": None, "payloads": ["{}"], "run_at_ms": None,
                     "dedup_keys": None, "on_duplicate": None, "default_max_attempts": 5, "costs": None,
                     "slots": None, **step}),
        ("now_ms", {}),
        ("claim_schedules", {"now_ms": None, "queues": [q], "limit": 10}),
        ("fire_schedule", {"id": 1, "claimed_at": 1, "ticks": [], "next_tick_at": None, "error": None,
                           "default_max_attempts": 5, **step}),
        ("sync_schedules", {"queues": [q], "names": [], "declared": [], "next_tick_ats": []}),
        ("queue_stats", {"queues": [q], "cap": 100_000}),
        ("queue_stats", {"queues": [q], "cap": 1}),
        ("estimated_rows", {"table": "lonnymq_message"}),
        ("expired_leases", {"grace_ms": 1_000}),
        ("queue_health", {"cap": 100}),
        ("queue_tenants", {"queue": q, "limit": 20, "cap": 100, "candidates": 1_000}),
        ("queue_tenants", {"queue": q, "limit": 20, "cap": 100, "candidates": 1}),
        ("workflow_start", {"name": "lookalike", "channel": None, "names": ["a", "b"], "queues": [q, q],
                            "channels": ["a", "a"], "payloads": ["{}", "{}"], "delays_ms": [0, 0],
                            "max_attempts": [5, 5], "edge_parents": [1], "edge_children": [2],
                            "on_failure_queue": None, "on_failure_channel": None, "on_failure_payload": None,
                            "on_failure_max_attempts": None, "tolerance_ms": 50}),
        ("workflow_ack", {"ids": [], "tokens": [], "outputs": [], "tolerance_ms": 50}),
        ("workflow_check", {}),
        ("workflow_cancel", lambda: {"id": ids["workflow"]}),
        ("workflow_prune", {"older_than_ms": 60_000, "limit": 10}),
        ("progress", {"ids": [1], "queues": [q], "channels": ["a"], "done": [1.0], "totals": [None],
                      "notes": [""]}),
        ("message_status", {"id": 1}),
        ("progress_prune", {"retention_ms": 60_000, "limit": 10}),
        ("order_channel", {"queue": q, "channel": "a", "ordered": False}),
        ("unblock_channel", {"queue": q, "channel": "a"}),
    ]
    # fmt: on


def test_every_named_statement_calls_the_real_function_past_planted_lookalikes(lookalike_planter, connect):
    conn = connect()
    real = functions_the_statements_call(conn)
    planted = conn.execute(
        "SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace AND proowner = %s::regrole",
        [lookalike_planter],
    ).fetchone()[0]
    assert planted == len(lookalikes(real)) > 3 * len(real)
    ids: dict[str, Any] = {}
    statements = _statements(ids)
    calling = {name for name, text in sql.queries().items() if set(CALL.findall(text)) & set(real)}
    assert {name for name, _ in statements} == calling, "every statement that calls a queue function runs"
    results: dict[str, list[tuple[Any, ...]]] = {}
    for name, params in statements:
        # A planted function would raise "planted ... ran"; a tie, AmbiguousFunction.
        found = conn.execute(sql.query(name), params() if callable(params) else params)
        results[name] = found.fetchall() if found.description is not None else []
        if name == "workflow_start":
            ids["workflow"] = results[name][0][0]
        if name == "dequeue":
            ids["leased"] = [row[0] for row in results[name]]
            ids["tokens"] = [row[8] for row in results[name]]
            ids["channels"] = [
                row[0] for row in conn.execute(
                    "SELECT id FROM lonnymq_channel WHERE queue = 'lookalike' ORDER BY name"
                ).fetchall()
            ]  # fmt: skip
    conn.commit()
    # What the real functions return.
    assert len(results["enqueue_many"][0][0]) == 3 and len(ids["leased"]) >= 3
    assert results["ack"] == [(ids["leased"][:1],)]
    assert results["cancel"] == [(ids["leased"][1], False)]
    assert results["worker_stop"] and results["subscribe"] == [(1,)] and len(results["publish"]) == 1
    assert results["sync_schedules"] == [(0, 0, 0)] and results["fire_schedule"] == [(None,)]
    assert results["snooze"] == [("snoozed",)] and results["pause_queue"] == [(True,)]
    assert results["workflow_cancel"] == [(0,)] and results["workflow_ack"] == [([],)]


def test_a_lookalike_taking_every_argument_and_one_more_makes_the_call_ambiguous_never_run(connect, dsn):
    """The limit of what a caller can do: a look-alike in the app's own schema that takes
    every argument and one more with a default ties with the real function whatever the call
    passes. PostgreSQL refuses the call (AmbiguousFunction); the look-alike never runs. So no
    other role may create objects in the app's schema (docs/admin.md, Database privileges)."""

    def plant(conn: psycopg.Connection) -> None:
        conn.execute(
            "CREATE FUNCTION public.lonnymq_next_due_v1(text[], extra interval DEFAULT NULL) RETURNS bigint"
            " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'planted ran'; END $$"
        )

    conn = connect()
    if conn.execute("SELECT current_schema() <> 'public'").fetchone()[0]:
        pytest.skip("the app is not installed in public here")
    with _planting_role(dsn, "lq_one_more", plant), pytest.raises(psycopg.errors.AmbiguousFunction):
        conn.execute(sql.query("next_due"), {"queues": ["q"]})
