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
from django_lonnymq.workflows import prune, requeue_failed_steps
from tests.harness import helpers

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


@pytest.mark.slow  # over 3 s: make test runs it, make test-fast leaves it out
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
    # wf_b is queued without a message, as well as released early.
    assert [p.problem for p in api.check()] == ["workflow_step_lost", "workflow_step_released_early"]
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
    # kept's wf_a is queued, its message deleted above: lost.
    assert [(p.problem, p.queue) for p in problems] == [
        ("workflow_step_lost", "wf_a"),
        ("workflow_step_orphaned", "wf_a"),
    ]
    assert f"workflow {gone_id}, which does not exist" in problems[1].detail
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
    from django_lonnymq.worker.lifecycle import array_literal, text_array_literal

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


# ---------------------------------------------------------------------------------------
# Cancelled steps and cancelled workflows
# ---------------------------------------------------------------------------------------


def dead_ids() -> list[int]:
    return [r["id"] for r in helpers.rows("SELECT id FROM lonnymq_dead_message ORDER BY id")]


def test_a_cancelled_workflows_dead_steps_stay_dead_when_requeued():
    flow = Workflow("doomed", channel="acme")
    failed = flow.step("wf_a", {}, max_attempts=1)
    running = flow.step("wf_b", {})
    flow.step("wf_c", {}, after=[failed, running])
    workflow_id = flow.start()
    # wf_a fails for good: the workflow fails.
    helpers.fail(helpers.dequeue("wf_a")[0], discard=True)
    assert api.workflow(workflow_id).state == "failed"
    # wf_b runs while the workflow is cancelled, and ends dead as cancelled.
    leased = helpers.dequeue("wf_b")[0]
    api.cancel_workflow(workflow_id)
    helpers.fail(leased, discard=False)
    info = api.workflow(workflow_id)
    assert info.state == "cancelled" and [s.state for s in info.steps] == ["dead", "cancelled", "cancelled"]
    both = dead_ids()
    assert len(both) == 2
    # Run again, they would release nothing and leave the workflow cancelled: left dead.
    assert api.requeue_dead(both) == []
    assert dead_ids() == both and count("lonnymq_message") == 0
    with pytest.raises(InvalidArgument, match="must name a workflow that is not cancelled") as raised:
        requeue_failed_steps(workflow_id)
    assert raised.value.field == "workflow_id" and raised.value.value == workflow_id
    info = api.workflow(workflow_id)
    assert info.state == "cancelled" and [s.state for s in info.steps] == ["dead", "cancelled", "cancelled"]
    assert api.check() == []


def test_api_cancel_of_a_queued_step_fails_its_workflow_and_a_requeue_resumes_it():
    flow = Workflow("cancelled step")
    first = flow.step("wf_a", {})
    flow.step("wf_b", {}, after=[first])
    flow.on_failure("wf_alert", {})
    workflow_id = flow.start()
    step_id = api.workflow(workflow_id).step("wf_a").id
    assert api.cancel([step_id]) == [step_id]
    info = api.workflow(workflow_id)
    assert info.state == "failed" and info.dead == 1 and [s.state for s in info.steps] == ["dead", "waiting"]
    assert helpers.dead_row(step_id)["reason"] == "cancelled"
    assert info.on_failure_message_id is not None  # the failure's message, as for any dead step
    assert api.check() == []
    assert requeue_failed_steps(workflow_id) == [step_id]
    assert api.workflow(workflow_id).state == "running"
    leased = helpers.dequeue("wf_a")
    assert ack_step(leased) == [step_id]
    assert api.workflow(workflow_id).step("wf_b").state == "queued"


def ack_step(leased) -> list[int]:
    return list(
        helpers.named(
            "workflow_ack",
            ids=[r["id"] for r in leased],
            tokens=[r["lease_token"] for r in leased],
            outputs=["null"] * len(leased),
            tolerance_ms=0,
        )
    )


def test_the_check_reports_a_step_whose_message_a_purge_deleted():
    flow = Workflow("purged", channel="acme")
    first = flow.step("wf_a", {})
    flow.step("wf_b", {}, after=[first])
    workflow_id = flow.start()
    assert api.check() == []
    channel_id = helpers.channel_row("wf_a", "acme")["id"]
    assert api.purge_channel(channel_id) == 1
    problems = api.check()
    assert [(p.problem, p.queue, p.channel) for p in problems] == [("workflow_step_lost", "wf_a", "acme")]
    assert f"step wf_a of workflow {workflow_id} is queued, but its message is gone" in problems[0].detail
    api.cancel_workflow(workflow_id)
    assert api.check() == []


# ---------------------------------------------------------------------------------------
# Bad input of step(after=...), chain() and chord()
# ---------------------------------------------------------------------------------------


BAD_CANVAS = [
    # (what, field, rule, build(flow, a_step))
    ("after an int", "after", "must be a step, a step's name, or a list", lambda f, a: f.step("q", {}, after=5)),
    ("after None", "after", "must be a step, a step's name, or a list", lambda f, a: f.step("q", {}, after=None)),
    ("after bytes", "after", "must be a step, a step's name, or a list", lambda f, a: f.step("q", {}, after=b"q")),
    ("after a dict", "after", "must be a step, a step's name, or a list", lambda f, a: f.step("q", {}, after={"q": 1})),
    ("chain: a 1-tuple", "steps[1]", "must be a (queue, payload) pair", lambda f, a: chain(f, ("q", 1), ("q",))),
    ("chain: a string", "steps[0]", "must be a (queue, payload) pair", lambda f, a: chain(f, "qp")),
    ("chain: None", "steps[0]", "must be a (queue, payload) pair", lambda f, a: chain(f, None)),
    ("chain: a 3-tuple", "steps[0]", "must be a (queue, payload) pair", lambda f, a: chain(f, ("q", 1, 2))),
    ("chain: after an int", "steps[1].after", "must be a step", lambda f, a: chain(f, ("q", 1), {"queue": "q", "payload": 1, "after": 5})),
    ("chain: an unknown argument", "steps[0]", "must name only arguments of Workflow.step", lambda f, a: chain(f, {"queue": "q", "payload": 1, "bogus": 2})),
    ("chain: no queue", "steps[0].queue", "must be given", lambda f, a: chain(f, {"payload": 1})),
    ("chain: a duplicate name", "name", "must be unique", lambda f, a: chain(f, {"queue": "q", "payload": 1, "name": "x"}, {"queue": "q", "payload": 1, "name": "x"})),
    ("chain: not a workflow", "flow", "must be a Workflow", lambda f, a: chain(None, ("q", 1))),
    ("chord: header an int", "header", "must be a list of steps", lambda f, a: chord(f, 5, ("q", 1))),
    ("chord: header a step", "header", "must be a list of steps", lambda f, a: chord(f, a, ("q", 1))),
    ("chord: header a string", "header", "must be a list of steps", lambda f, a: chord(f, "q", ("q", 1))),
    ("chord: empty header", "header", "must hold at least one step", lambda f, a: chord(f, [], ("q", 1))),
    ("chord: header of objects", "header[1]", "must be a step of this workflow", lambda f, a: chord(f, [a, object()], ("q", 1))),
    ("chord: callback a 1-tuple", "callback", "must be a (queue, payload) pair", lambda f, a: chord(f, [a], ("q",))),
    ("chord: callback None", "callback", "must be a (queue, payload) pair", lambda f, a: chord(f, [a], None)),
    ("chord: not a workflow", "flow", "must be a Workflow", lambda f, a: chord(None, [a], ("q", 1))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("field", "rule", "build"), [c[1:] for c in BAD_CANVAS], ids=[c[0] for c in BAD_CANVAS]
)
def test_bad_canvas_input_is_a_typed_error_and_leaves_the_workflow_as_it_was(field, rule, build):
    flow = Workflow("canvas")
    first = flow.step("q", {})
    with pytest.raises(InvalidArgument) as raised:
        build(flow, first)
    assert raised.value.field == field and rule in str(raised.value), raised.value
    assert flow.steps == [first] and list(flow._by_name) == ["q"]
    assert flow.step("q", {}).name == "q.2"  # the default names go on as before
    nothing_written()


def test_a_chain_step_may_name_its_extra_parents_as_one_step_or_name():
    flow = Workflow("canvas")
    a, b = flow.step("q", {}, name="a"), flow.step("q", {}, name="b")
    made = chain(
        flow, ("q", 1), {"queue": "q", "payload": 2, "after": a}, {"queue": "q", "payload": 3, "after": "b"}
    )
    assert made[1].after == [made[0], a] and made[2].after == [made[1], "b"]
    assert chord(flow, ["a", b], {"queue": "q", "payload": 4, "after": made[2]}).after == ["a", b, made[2]]


def test_requeue_failed_steps_of_an_unknown_workflow_is_refused_as_workflow_is():
    for call in (api.workflow, requeue_failed_steps):
        with pytest.raises(
            InvalidArgument, match="must name an existing workflow on database 'default'"
        ) as raised:
            call(123456789)
        assert raised.value.field == "workflow_id" and raised.value.value == 123456789


def test_a_requeue_waiting_on_a_workflows_cancel_sees_it_and_leaves_the_step_dead(connect):
    """The requeue locks the step's row before it reads its workflow's state: a requeue that
    waits for a cancel in progress (which holds the steps' rows) reads the cancel's outcome
    once it commits, instead of the state it saw before it waited."""
    flow = Workflow("racing")
    failed = flow.step("wf_a", {}, max_attempts=1)
    flow.step("wf_b", {}, after=[failed])
    workflow_id = flow.start()
    helpers.fail(helpers.dequeue("wf_a")[0], discard=True)
    step_id = dead_ids()[0]
    canceller = connect(autocommit=False)
    canceller.execute(sql.query("workflow_cancel"), {"id": workflow_id})  # holds the steps' rows
    requeued: list = []

    def requeue() -> None:
        conn = connect()
        requeued.append(conn.execute(sql.query("requeue_dead"), {"ids": [step_id], "reset_attempts": True,
                                                                "tolerance_ms": 50}).fetchone()[0])  # fmt: skip

    thread = threading.Thread(target=requeue)
    thread.start()
    probe = connect()
    for _ in range(200):  # until the requeue waits for the cancel's row lock
        waiting = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE %s",  # this test's, not a neighbour's
            ["%lonnymq_requeue_dead_v1%"],
        ).fetchone()[0]
        if waiting:
            break
        threading.Event().wait(0.05)
    assert waiting == 1
    canceller.commit()
    thread.join(10)
    assert requeued == [[]]
    assert dead_ids() == [step_id] and count("lonnymq_message") == 0
    assert api.workflow(workflow_id).state == "cancelled" and api.check() == []
