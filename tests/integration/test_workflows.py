"""Workflows on the real database, without workers: bad input is refused before anything is
written; 10,000 steps start; waiting steps stay out of the message table; a child is released
exactly once, and never before all its parents, under concurrent (and duplicate) acks from
several connections; pruning; the check's invariants."""

from __future__ import annotations

import threading

import psycopg
import pytest
from django.db import connection

from django_lonnymq import Workflow, api, chain, chord, sql
from django_lonnymq.bounds import MAX_WORKFLOW_STEPS
from django_lonnymq.exceptions import InvalidArgument, PayloadError
from django_lonnymq.workflows import prune

pytestmark = pytest.mark.django_db(transaction=True)


def count(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
        return cursor.fetchone()[0]


def nothing_written() -> None:
    assert count("lonnymq_workflow") == 0 and count("lonnymq_workflow_step") == 0
    assert count("lonnymq_message") == 0


def refused(field: str, rule: str, build) -> None:
    with pytest.raises(InvalidArgument) as raised:
        build()
    assert raised.value.field == field and rule in str(raised.value), raised.value
    nothing_written()


def test_bad_input_is_refused_naming_the_field_and_nothing_is_written():
    def cycle():
        flow = Workflow("cycle")
        flow.step("q", {}, name="a", after=["c"])
        flow.step("q", {}, name="b", after=["a"])
        flow.step("q", {}, name="c", after=["b"])
        flow.start()

    refused("after", "must not form a cycle", cycle)

    def itself():
        flow = Workflow("self")
        flow.step("q", {}, name="a", after=["a"])

    refused("after", "must not name the step itself", itself)

    def other_workflow():
        one, two = Workflow("one"), Workflow("two")
        parent = one.step("q", {})
        two.step("q", {}, after=[parent])

    refused("after", "must name steps of the same workflow", other_workflow)

    def unknown_name():
        flow = Workflow("unknown")
        flow.step("q", {}, after=["nope"])
        flow.start()

    refused("after", "must name a step of this workflow", unknown_name)

    def duplicate_name():
        flow = Workflow("dup")
        flow.step("q", {}, name="x")
        flow.step("q", {}, name="x")

    refused("name", "must be unique", duplicate_name)

    def too_many():
        flow = Workflow("big")
        flow.steps = [None] * MAX_WORKFLOW_STEPS  # as if that many were declared
        flow.step("q", {})

    refused("steps", f"at most {MAX_WORKFLOW_STEPS}", too_many)
    refused("steps", "at least 1", lambda: Workflow("empty").start())
    refused("queue", "characters", lambda: Workflow("q").step("", {}))

    def payload_too_big():
        Workflow("big payload").step("q", "x" * (9 * 1024 * 1024))

    with pytest.raises(PayloadError):
        payload_too_big()
    nothing_written()


def test_starting_twice_is_refused(transactional_db):
    flow = Workflow("twice")
    flow.step("q", {})
    workflow_id = flow.start()
    with pytest.raises(InvalidArgument) as raised:
        flow.start()
    assert raised.value.field == "workflow" and "started already" in str(raised.value)
    with pytest.raises(InvalidArgument):
        flow.step("q", {})
    assert count("lonnymq_workflow") == 1 and api.workflow(workflow_id).steps_total == 1


def test_the_sql_function_refuses_a_backward_edge_too(connect):
    conn = connect()
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            sql.query("workflow_start"),
            {"name": "raw", "channel": None, "names": ["a", "b"], "queues": ["q", "q"], "channels": ["d", "d"],
             "payloads": ["{}", "{}"], "delays_ms": [0, 0], "max_attempts": [1, 1], "edge_parents": [2],
             "edge_children": [1], "on_failure_queue": None, "on_failure_channel": None,
             "on_failure_payload": None, "on_failure_max_attempts": None, "tolerance_ms": 50},
        )  # fmt: skip
    assert raised.value.sqlstate == "LQ001" and "no cycle" in str(raised.value)
    nothing_written()


def test_ten_thousand_steps_start_and_only_the_roots_are_messages():
    flow = Workflow("wide", channel="tenant")
    root = flow.step("wf_root", {})
    parts = [flow.step("wf_part", {"i": i}, after=[root]) for i in range(9_998)]
    chord(flow, parts, ("wf_merge", {}))
    workflow_id = flow.start()
    info = api.workflow(workflow_id)
    assert info.steps_total == 10_000 and info.state == "running"
    assert count("lonnymq_message") == 1
    assert count("lonnymq_workflow_edge") == 9_998 * 2
    assert api.check() == []


def lease(conn, queue: str) -> list[tuple[int, object]]:
    found = conn.execute(sql.query("dequeue"), {"queue": queue, "batch_size": 1000, "lease_ms": 60_000,
                                                 "worker": "t", "tolerance_ms": 0}).fetchall()  # fmt: skip
    return [(row[0], row[8]) for row in found]


def ack(conn, ids_tokens, output='"ok"') -> list[int]:
    return conn.execute(
        sql.query("workflow_ack"),
        {"ids": [i for i, _ in ids_tokens], "tokens": [t for _, t in ids_tokens],
         "outputs": [output] * len(ids_tokens), "tolerance_ms": 0},
    ).fetchone()[0]  # fmt: skip


def test_a_release_into_hundreds_of_channels_holds_stripe_locks_and_every_part_runs(connect):
    """The root's ack releases 300 parts, each in its own channel: past 64 channels the
    release holds one shared lock per stripe, not per channel (migration 0040), and every
    part is still served and the merge released after them."""
    flow = Workflow("striped")
    root = flow.step("wf_root", {})
    parts = [flow.step("wf_part", {"i": i}, after=[root], channel=f"tenant-{i}") for i in range(300)]
    chord(flow, parts, ("wf_merge", {}))
    workflow_id = flow.start()
    worker, watcher = connect(), connect()
    [leased] = lease(worker, "wf_root")
    worker.execute("BEGIN")  # the ack's locks, seen before it commits
    assert ack(worker, [leased]) == [leased[0]]
    stripes, channels = watcher.execute(
        "SELECT count(*) FILTER (WHERE classid = 1280135475), count(*) FILTER (WHERE classid = 1280135473)"
        " FROM pg_locks WHERE locktype = 'advisory' AND pid = %s",
        [worker.info.backend_pid],
    ).fetchone()
    assert (stripes, channels) == (300, 0)
    worker.execute("COMMIT")
    done = 0
    while leased_parts := lease(worker, "wf_part"):
        ack(worker, leased_parts)
        done += len(leased_parts)
    assert done == 300
    [merge] = lease(worker, "wf_merge")
    ack(worker, [merge])
    assert api.workflow(workflow_id).state == "succeeded"
    assert api.check() == []


def test_concurrent_duplicate_acks_release_a_fan_in_exactly_once_and_only_after_every_parent(connect):
    parents = 12
    flow = Workflow("fan-in")
    root = flow.step("wf_root", {})
    tops = [flow.step("wf_part", {"i": i}, after=[root], name=f"p{i}") for i in range(parents)]
    flow.step("wf_merge", {}, after=tops, name="merge")
    workflow_id = flow.start()
    main = connect()
    ack(main, lease(main, "wf_root"))
    leased = lease(main, "wf_part")
    assert len(leased) == parents

    # All but the last parent: each acked by two connections at once (a step run twice).
    threads_n = 2 * (parents - 1)
    barrier = threading.Barrier(threads_n, timeout=10)
    results: list = [None] * threads_n

    def body(index: int) -> None:
        conn = psycopg.connect(main.info.dsn, autocommit=True)
        try:
            barrier.wait()
            results[index] = ack(conn, [leased[index // 2]], output=f'{{"p": {index // 2}}}')
        except Exception as exc:
            results[index] = exc
        finally:
            conn.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "an ack hung (deadlock?)"
    assert not [r for r in results if isinstance(r, Exception)], results
    acked = sorted(i for r in results for i in r)
    assert acked == sorted(i for i, _ in leased[:-1]), "each step acked once"
    # The last parent has not succeeded: merge waits, out of the message table.
    info = api.workflow(workflow_id)
    assert info.step("merge").state == "waiting"
    assert lease(main, "wf_merge") == []
    assert api.check() == []

    assert ack(main, leased[-1:]) == [leased[-1][0]]
    assert ack(main, leased[-1:]) == []  # a duplicate after the fact acks nothing
    [(merge_id, token)] = lease(main, "wf_merge")
    assert main.execute(
        "SELECT releases FROM lonnymq_workflow_step WHERE id = %s", [merge_id]
    ).fetchone() == (1,)
    assert api.check() == []
    ack(main, [(merge_id, token)])
    info = api.workflow(workflow_id)
    assert info.state == "succeeded" and info.remaining == 0
    assert info.step("p3").output == {"p": 3}
    assert prune(0) == 1 and count("lonnymq_workflow_step") == 0 and count("lonnymq_workflow_edge") == 0


def test_the_check_reports_a_broken_invariant(connect):
    flow = Workflow("broken")
    chain(flow, ("wf_a", {}), ("wf_b", {}))
    workflow_id = flow.start()
    conn = connect()
    conn.execute("UPDATE lonnymq_workflow_step SET state = 'succeeded' WHERE workflow_id = %s AND pending = 0",
                 [workflow_id])  # fmt: skip
    assert [p.problem for p in api.check()] == ["workflow_step_not_released"]
    conn.execute("UPDATE lonnymq_workflow_step SET state = 'queued' WHERE workflow_id = %s AND pending = 0",
                 [workflow_id])  # fmt: skip
    conn.execute("UPDATE lonnymq_workflow_step SET releases = 1, pending = 0, state = 'queued'"
                 " WHERE workflow_id = %s AND releases = 0", [workflow_id])  # fmt: skip
    assert [p.problem for p in api.check()] == ["workflow_step_released_early"]
    api.cancel_workflow(workflow_id)
    conn.execute("DELETE FROM lonnymq_message")


def test_a_deleted_workflow_takes_its_steps_and_the_check_names_an_orphaned_step(connect):
    """Steps have no foreign key to their workflow (0037): a DELETE or TRUNCATE of workflows
    deletes their steps (statement triggers), and a step whose workflow is missing is a
    problem the check names."""
    kept, gone = Workflow("kept"), Workflow("gone")
    chain(kept, ("wf_a", {}), ("wf_b", {}))
    chain(gone, ("wf_a", {}), ("wf_b", {}), ("wf_c", {}))
    kept_id, gone_id = kept.start(), gone.start()
    conn = connect()
    conn.execute("DELETE FROM lonnymq_message")
    conn.execute("DELETE FROM lonnymq_workflow WHERE id = %s", [gone_id])
    left = conn.execute("SELECT workflow_id, count(*) FROM lonnymq_workflow_step GROUP BY 1").fetchall()
    assert left == [(kept_id, 2)]
    conn.execute(
        "INSERT INTO lonnymq_workflow_step (id, workflow_id, name, queue, channel, payload, max_attempts,"
        " pending, state) VALUES (nextval('lonnymq_message_id_seq'), %s, 'stray', 'wf_a', 'default', '{}', 1, 0,"
        " 'waiting')",
        [gone_id],
    )
    problems = api.check()
    assert [(p.problem, p.queue) for p in problems] == [("workflow_step_orphaned", "wf_a")]
    assert f"workflow {gone_id}, which does not exist" in problems[0].detail
    conn.execute("TRUNCATE lonnymq_workflow")  # a TRUNCATE takes every step, orphans too
    assert count("lonnymq_workflow_step") == 0


def test_a_released_step_keeps_its_payload_until_its_ack(connect):
    """The release reads each step once: the step's row keeps the payload its message was
    made from, and the step's ack forgets it (the output is what stays)."""
    flow = Workflow("payloads")
    chain(flow, ("wf_a", {"n": 1}), ("wf_b", {"n": 2}))
    workflow_id = flow.start()
    conn = connect()
    payloads = "SELECT name, state, payload FROM lonnymq_workflow_step WHERE workflow_id = %s ORDER BY id"
    ack(conn, lease(conn, "wf_a"))
    assert conn.execute(payloads, [workflow_id]).fetchall() == [("wf_a", "succeeded", None),
                                                                ("wf_b", "queued", {"n": 2})]  # fmt: skip
    [(b_id, token)] = lease(conn, "wf_b")
    assert conn.execute("SELECT payload FROM lonnymq_message WHERE id = %s", [b_id]).fetchone() == ({"n": 2},)
    ack(conn, [(b_id, token)])
    assert conn.execute(payloads, [workflow_id]).fetchall() == [("wf_a", "succeeded", None),
                                                                ("wf_b", "succeeded", None)]  # fmt: skip
    assert api.workflow(workflow_id).state == "succeeded"
    conn.execute("DELETE FROM lonnymq_workflow")


def test_acks_of_two_workflows_at_once_release_shared_children_once_without_deadlock(connect):
    """Two connections ack, at once and in opposite orders, the parents of two children that
    every parent shares, in two workflows per call: each child is released once, by the call
    that acks its last parent, and no call waits on another for good."""
    ids = []
    for n in range(2):
        flow = Workflow(f"grid-{n}")
        root = flow.step("wf_root", {})
        tops = [flow.step("wf_part", {"i": i}, after=[root], name=f"p{i}") for i in range(8)]
        flow.step("wf_merge", {}, after=tops, name="x")
        flow.step("wf_merge", {}, after=tops, name="y")
        ids.append(flow.start())
    main = connect()
    ack(main, lease(main, "wf_root"))
    leased = lease(main, "wf_part")
    assert len(leased) == 16
    halves = [leased[0::2], leased[1::2][::-1]]  # each half holds parents of both workflows
    barrier = threading.Barrier(2, timeout=10)
    results: list = [None, None]

    def body(index: int) -> None:
        conn = psycopg.connect(main.info.dsn, autocommit=True)
        try:
            for part in range(4):  # two parents per call, the halves' calls interleaved
                barrier.wait()
                results[index] = (results[index] or []) + ack(conn, halves[index][2 * part : 2 * part + 2])
        except Exception as exc:
            results[index] = exc
        finally:
            conn.close()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "an ack hung (deadlock?)"
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sorted(results[0] + results[1]) == sorted(i for i, _ in leased)
    released = main.execute(
        "SELECT name, releases, pending, state FROM lonnymq_workflow_step WHERE name IN ('x', 'y') ORDER BY id"
    ).fetchall()
    assert released == [("x", 1, 0, "queued"), ("y", 1, 0, "queued")] * 2
    assert len(lease(main, "wf_merge")) == 4
    assert api.check() == []
    for workflow_id in ids:
        assert api.workflow(workflow_id).remaining == 2


def test_outputs_sent_as_one_array_literal_come_back_unchanged(connect):
    """The worker sends a step ack's outputs as one quoted array literal (not psycopg's list
    adapter): quotes, backslashes, braces, commas and NULL-like text survive it."""
    from django_lonnymq.worker.completion import array_literal, text_array_literal

    outputs = ['{"a": "x\\"y\\\\z", "b": "{},NULL"}', None, '"NULL"', "[1, 2]", '" spaced "']
    flow = Workflow("outputs")
    steps = [flow.step("wf_part", {"i": i}, name=f"s{i}") for i in range(len(outputs))]
    flow.step("wf_merge", {}, after=steps, name="merge")
    workflow_id = flow.start()
    conn = connect()
    leased = sorted(lease(conn, "wf_part"))
    acked = conn.execute(
        sql.query("workflow_ack"),
        {"ids": array_literal(i for i, _ in leased), "tokens": array_literal(t for _, t in leased),
         "outputs": text_array_literal(outputs), "tolerance_ms": 0},
    ).fetchone()[0]  # fmt: skip
    assert sorted(acked) == [i for i, _ in leased]
    info = api.workflow(workflow_id)
    assert [info.step(f"s{i}").output for i in range(len(outputs))] == [
        {"a": 'x"y\\z', "b": "{},NULL"}, None, "NULL", [1, 2], " spaced "
    ]  # fmt: skip
    assert info.step("merge").state == "queued"


def test_a_steps_edges_are_arrays_on_its_row_and_the_edge_view_lists_them(connect):
    flow = Workflow("diamond")
    top = flow.step("wf_root", {}, name="top")
    left = flow.step("wf_part", {}, after=[top], name="left")
    right = flow.step("wf_part", {}, after=[top], name="right")
    flow.step("wf_merge", {}, after=[right, left], name="bottom")
    workflow_id = flow.start()
    conn = connect()
    rows = conn.execute(
        "SELECT name, id, parents, children, pending FROM lonnymq_workflow_step WHERE workflow_id = %s ORDER BY id",
        [workflow_id],
    ).fetchall()
    ids = {name: step_id for name, step_id, *_ in rows}
    arrays = {name: (parents, children, pending) for name, _, parents, children, pending in rows}
    assert arrays == {
        "top": ([], [ids["left"], ids["right"]], 0),
        "left": ([ids["top"]], [ids["bottom"]], 1),
        "right": ([ids["top"]], [ids["bottom"]], 1),
        "bottom": ([ids["left"], ids["right"]], [], 2),
    }
    edges = conn.execute("SELECT parent_id, child_id FROM lonnymq_workflow_edge ORDER BY 1, 2").fetchall()
    assert edges == sorted(
        [(ids["top"], ids["left"]), (ids["top"], ids["right"]), (ids["left"], ids["bottom"]),
         (ids["right"], ids["bottom"])]
    )  # fmt: skip
    # The table keeps the rule the edge table had: an edge goes from a smaller id to a larger.
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE lonnymq_workflow_step SET parents = ARRAY[%s::bigint] WHERE id = %s",
                     [ids["bottom"], ids["left"]])  # fmt: skip
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE lonnymq_workflow_step SET children = ARRAY[%s::bigint] WHERE id = %s",
                     [ids["top"], ids["left"]])  # fmt: skip


def test_the_dequeue_gives_steps_their_name_and_parents_outputs_and_plain_messages_nulls(connect):
    flow = Workflow("inputs")
    top = flow.step("wf_root", {}, name="top")
    flow.step("wf_part", {}, after=[top], name="one")
    flow.step("wf_part", {}, after=[top], name="two")
    flow.start()
    api.enqueue("wf_part", {"x": 1}, channel="plain")
    conn = connect()
    ack(conn, lease(conn, "wf_root"), output='{"made": 7}')
    params = {"queue": "wf_part", "batch_size": 10, "lease_ms": 60_000, "worker": "t", "tolerance_ms": 0}
    rows = conn.execute(sql.query("dequeue"), params).fetchall()
    found = {row[6] is not None and row[6].startswith("lonnymq.step:"): [] for row in rows}
    for row in rows:
        found[row[6] is not None and row[6].startswith("lonnymq.step:")].append((row[10], row[11]))
    assert sorted(found[True]) == [("one", {"top": {"made": 7}}), ("two", {"top": {"made": 7}})]
    assert found[False] == [(None, None)]
    # The inputs are read with a snapshot of their own, after the dequeue's (VOLATILE).
    assert (
        conn.execute(
            "SELECT provolatile FROM pg_proc WHERE proname = 'lonnymq_workflow_inputs_v2'"
        ).fetchone()[0]
        == "v"
    )
