"""Workflows: ``python -m bench.workflows``.

1. **Fan-out/fan-in**: a 1 -> 1,000 -> 1 workflow against 1,002 independent messages, the same
   no-op handler (queue ``bench``), the same running worker (``--concurrency 4``), in two
   ways, round by round:

   - *through the API*, as a project writes it: ``Workflow(...)``, its 1,002 ``flow.step()``
     calls and ``flow.start()`` in ``transaction.atomic()``, against ``enqueue_many()`` of the
     same 1,002 payloads in ``transaction.atomic()``; wall time from the first call until the
     last step is done;
   - *the SQL calls alone*: the start's one statement (its arrays in binary, as
     ``Workflow.start()`` sends them) against one ``lonnymq_enqueue_many_v2`` (as
     ``enqueue_many()`` calls it) whose payloads
     the server fills in (``array_fill``: no payload crosses the wire); wall time from the
     call, and from its commit (its return), until the last step is done; and where the
     workflow's time went, from its steps' ``finished_at`` (the start, the root's hop, the
     release in its ack, the parts, the merge's hop).
2. **Chain latency**: a chain of ``--chain`` steps (queue ``bench_step``, no-op): from a
   parent's ack (the child's ``released_at``, written by that ack) to the child's start,
   against the enqueue-to-start latency of single messages enqueued one at a time into an
   idle worker (queue ``bench_latency``).
3. **Per batch**: the worker's two calls per batch, made one after the other from this process
   (no worker running): a 1 -> ``--width`` -> 1 workflow's parts leased 50 at a time and acked
   (``dequeue``, ``workflow_ack``), against ``--width`` + 2 plain messages (``dequeue``,
   ``ack``); each call's time summed over the drain, and the root's ack (which releases the
   parts). A worker's control thread makes these calls in series, so what the steps' calls cost
   over the plain ones is added to the drain.
4. **Plain messages pay nothing**: an A/B of draining ``--ab-messages`` plain messages (dequeue
   and ack, ``--burst``) by this tree's worker and by the worker of ``--base`` (a checkout of
   the commit before workflows; the same database), alternating, ``--rounds`` each.

Medians of ``--rounds`` runs. The database is ``--database-url`` (default
postgres://postgres@127.0.0.1:5432/lq_bench_workflows); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from django_lonnymq import sql
from django_lonnymq.worker.lifecycle import array_literal, text_array_literal

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_workflows"


def start_params(queue: str, steps: list[tuple[str, list[int]]]) -> dict[str, object]:
    """workflow_start parameters: steps as (name, parent positions, 1-based)."""
    return {
        "name": "bench", "channel": "tenant-0", "names": [s[0] for s in steps], "queues": [queue] * len(steps),
        "channels": ["tenant-0"] * len(steps), "payloads": [core.PAYLOAD_TEXT] * len(steps),
        "delays_ms": [0] * len(steps), "max_attempts": [5] * len(steps),
        "edge_parents": [p for _, ps in steps for p in ps],
        "edge_children": [i + 1 for i, (_, ps) in enumerate(steps) for _ in ps],
        "on_failure_queue": None, "on_failure_channel": None, "on_failure_payload": None,
        "on_failure_max_attempts": None, "tolerance_ms": 50,
    }  # fmt: skip


def fan_steps(width: int) -> list[tuple[str, list[int]]]:
    """A 1 -> width -> 1 workflow's steps for start_params: root, the parts, merge."""
    return [("root", [])] + [(f"p{i}", [1]) for i in range(width)] + [("merge", list(range(2, width + 2)))]


def wait_empty(conn, what: str, timeout: float = 300) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn.execute(what).fetchone()[0]:
            return time.perf_counter()
        time.sleep(0.005)
    raise RuntimeError(f"not done in {timeout}s: {what}")


def django_setup(url: str) -> None:
    """This process as a project using the queue (bench.settings, the bench's database)."""
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


def api_round(conn, width: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """One round through the public API: the workflow's wall time, then the messages'."""
    from django.db import transaction

    from django_lonnymq import Workflow, enqueue_many

    tidy(conn)
    start = time.perf_counter()
    with transaction.atomic():
        flow = Workflow("bench", channel="tenant-0")
        root = flow.step("bench", core.PAYLOAD, name="root")
        parts = [flow.step("bench", core.PAYLOAD, name=f"p{i}", after=[root]) for i in range(width)]
        flow.step("bench", core.PAYLOAD, name="merge", after=parts)
        flow.start()
    flow_time = wait_empty(conn, DONE_FLOW) - start
    tidy(conn)
    start = time.perf_counter()
    with transaction.atomic():
        enqueue_many("bench", [core.PAYLOAD] * (width + 2), channel="tenant-0")
    return flow_time, wait_empty(conn, DONE_PLAIN) - start


def tidy(conn) -> None:  # type: ignore[no-untyped-def]
    """Before each timed run: no workflow left, and the tables vacuumed. With autovacuum off
    (as on the machine the figures come from) the dead rows of the runs before would slow
    each run more than the last, and whichever side ran later would pay more."""
    conn.execute("DELETE FROM lonnymq_workflow")
    conn.execute("VACUUM lonnymq_message, lonnymq_workflow_step, lonnymq_workflow")


DONE_FLOW = "SELECT count(*) = 0 FROM lonnymq_workflow WHERE state <> 'succeeded'"
DONE_PLAIN = "SELECT NOT EXISTS (SELECT 1 FROM lonnymq_message)"


def fan(url: str, rounds: int, width: int) -> dict[str, list[float]]:
    """Per round, through the API (workflow, messages) and through the SQL calls alone: wall
    times from the call that starts the work (the workflow's start, the enqueue) to the last
    step done, and from its commit (the call's return) to the last step done."""
    django_setup(url)
    conn = core.connect(url)
    worker = core.start_worker(url, "bench", "--concurrency", "4", "--batch-size", "50")
    flows, plain, flows_after, plain_after = [], [], [], []
    phases: list[dict[str, float]] = []
    api_flows, api_plain = [], []
    # The arrays in binary, as Workflow.start() sends them (db.rows(..., arrays=True)).
    start_sql = sql.binary_arrays(sql.query("workflow_start"))
    steps = fan_steps(width)
    try:
        worker.wait_for("lonnymq worker")
        time.sleep(2)  # its LISTEN and first dequeue
        for _ in range(rounds):
            flow_time, plain_time = api_round(conn, width)
            api_flows.append(flow_time)
            api_plain.append(plain_time)
            tidy(conn)
            start = time.perf_counter()
            conn.execute(start_sql, start_params("bench", steps))
            committed = time.perf_counter()
            end = wait_empty(conn, DONE_FLOW)
            flows.append(end - start)
            flows_after.append(end - committed)
            phases.append(timeline(conn, start, committed, end))
            tidy(conn)
            start = time.perf_counter()
            conn.execute(
                "SELECT lonnymq_enqueue_many_v2('bench', array_fill('tenant-0'::text, ARRAY[%s]),"
                " array_fill(%s::jsonb, ARRAY[%s]), NULL, NULL, NULL, NULL, NULL, NULL, 5, 1000, 50)",
                [width + 2, core.PAYLOAD_TEXT, width + 2],
            )
            committed = time.perf_counter()
            end = wait_empty(conn, DONE_PLAIN)
            plain.append(end - start)
            plain_after.append(end - committed)
    finally:
        worker.stop()
        conn.close()
    return {"api_flows": api_flows, "api_plain": api_plain, "flows": flows, "plain": plain,
            "flows_after": flows_after, "plain_after": plain_after, "phases": phases}  # fmt: skip


PHASES = {
    "start": "the start's call, to its commit",
    "to the root's ack": "its commit, to the root's ack (a wake-up, a dequeue, the handler)",
    "root's ack to the first part's": "the root's ack (the release of the parts), to the first part's ack",
    "the parts": "the first part's ack, to the last part's",
    "the merge's hop": "the last part's ack (the merge's release), to the merge's ack",
    "seen done": "the merge's ack, to this process seeing the workflow done",
}


def timeline(conn, start: float, committed: float, end: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Where one SQL-only workflow's time went, from its steps' finished_at (each the start of
    the transaction of the ack that finished it) against this process's clock."""
    wall, perf = time.time(), time.perf_counter()
    root, first, last, merge = conn.execute(
        "SELECT extract(epoch FROM max(finished_at) FILTER (WHERE name = 'root'))::float8,"
        " extract(epoch FROM min(finished_at) FILTER (WHERE name LIKE 'p%%'))::float8,"
        " extract(epoch FROM max(finished_at) FILTER (WHERE name LIKE 'p%%'))::float8,"
        " extract(epoch FROM max(finished_at) FILTER (WHERE name = 'merge'))::float8 FROM lonnymq_workflow_step"
    ).fetchone()
    committed_at, end_at = wall - (perf - committed), wall - (perf - end)
    return dict(zip(PHASES, [committed - start, root - committed_at, first - root, last - first,
                             merge - last, end_at - merge], strict=True))  # fmt: skip


def chain_latency(url: str, length: int, singles: int) -> tuple[list[float], list[float]]:
    conn = core.connect(url)
    path = Path(tempfile.mkstemp(prefix="lq-bench-chain-")[1])
    worker = core.start_worker(
        url,
        "bench_step",
        "--queue",
        "bench_latency",
        "--concurrency",
        "4",
        LONNYMQ_BENCH_LATENCY_FILE=str(path),
    )
    try:
        worker.wait_for("lonnymq worker")
        time.sleep(2)  # its LISTEN and first dequeue
        conn.execute("DELETE FROM lonnymq_workflow")
        steps = [("s0", [])] + [(f"s{i}", [i]) for i in range(1, length)]
        conn.execute(sql.query("workflow_start"), start_params("bench_step", steps))
        wait_empty(conn, "SELECT count(*) = 0 FROM lonnymq_workflow WHERE state <> 'succeeded'", timeout=600)
        released = dict(
            conn.execute(
                "SELECT id, extract(epoch FROM released_at)::float8 FROM lonnymq_workflow_step ORDER BY id"
            ).fetchall()
        )
        first = min(released)
        starts = {
            int(a): float(b) for a, b in (line.split() for line in path.read_text().split("\n") if line)
        }
        chain = [starts[i] - released[i] for i in released if i != first]
        path.write_text("")
        for _ in range(singles):
            conn.execute(
                "SELECT lonnymq_enqueue_v1('bench_latency', 'tenant-0', %s::jsonb, NULL, NULL, 0, NULL, 5, 1000, 50)",
                [f'{{"t": {time.time():.6f}}}'],
            )
            time.sleep(0.05)
        time.sleep(1)
        idle = [float(line.split()[1]) for line in path.read_text().split("\n") if line]
    finally:
        worker.stop()
        conn.close()
        path.unlink()
    return chain, idle


def batch_calls(url: str, rounds: int, width: int) -> dict[str, list[float]]:
    """Per round, seconds: the root's ack (the release), the steps' dequeues and acks summed,
    then the plain messages' dequeues and acks summed (batches of 50, as the worker's)."""
    conn = core.connect(url)
    dequeue, ack, step_ack = sql.query("dequeue"), sql.query("ack"), sql.query("workflow_ack")
    start_sql = sql.binary_arrays(sql.query("workflow_start"))
    lease = {"queue": "bench", "lease_ms": 600_000, "worker": "bench", "tolerance_ms": 50}

    def drain_timed(batch: int, acked: str, step: bool) -> tuple[float, float]:
        leasing = acking = 0.0
        while True:
            t0 = time.perf_counter()
            rows = conn.execute(dequeue, {**lease, "batch_size": batch}, prepare=True).fetchall()
            t1 = time.perf_counter()
            if not rows:
                return leasing, acking
            params = {"ids": array_literal(r[0] for r in rows), "tokens": array_literal(r[8] for r in rows)}
            if step:
                params |= {"outputs": text_array_literal([None] * len(rows)), "tolerance_ms": 50}
            conn.execute(acked, params, prepare=True)
            leasing, acking = leasing + t1 - t0, acking + time.perf_counter() - t1

    runs: dict[str, list[float]] = {k: [] for k in ("release", "step_dequeue", "step_ack", "dequeue", "ack")}
    try:
        conn.execute("DELETE FROM lonnymq_message")
        for _ in range(rounds):
            tidy(conn)
            conn.execute(start_sql, start_params("bench", fan_steps(width)))
            root = conn.execute(dequeue, {**lease, "batch_size": 1}).fetchall()
            t0 = time.perf_counter()
            conn.execute(step_ack, {"ids": array_literal([root[0][0]]), "tokens": array_literal([root[0][8]]),
                                    "outputs": "{NULL}", "tolerance_ms": 50})  # fmt: skip
            runs["release"].append(time.perf_counter() - t0)
            leasing, acking = drain_timed(50, step_ack, True)
            runs["step_dequeue"].append(leasing)
            runs["step_ack"].append(acking)
            tidy(conn)
            core.enqueue_many(conn, "bench", ["tenant-0"] * (width + 2))
            leasing, acking = drain_timed(50, ack, False)
            runs["dequeue"].append(leasing)
            runs["ack"].append(acking)
    finally:
        conn.close()
    return runs


def drain(url: str, root: Path, messages: int) -> float:
    conn = core.connect(url)
    try:
        core.reset(conn)
        core.fill(conn, "bench", messages, [f"tenant-{i}" for i in range(10)])
    finally:
        conn.close()
    proc = core.start_worker(url, "bench", "--burst", "--concurrency", "4", "--batch-size", "50", root=root)
    code = proc.wait(timeout=600)
    stats = core.worker_stats(proc)
    if code != 0 or stats.get("acked") != messages:
        raise RuntimeError(f"worker exited {code} with {stats}:\n" + "\n".join(proc.lines[-20:]))
    return stats["acked"] / stats["elapsed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("LONNYMQ_BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--chain", type=int, default=1000)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--ab-messages", type=int, default=5000)
    parser.add_argument("--base", type=Path, help="a checkout of the commit before workflows (for the A/B)")
    args = parser.parse_args()
    core.recreate_database(args.database_url)
    print(" ".join(f"{k}={v}" for k, v in {**core.machine_facts()}.items()))
    runs = fan(args.database_url, args.rounds, args.width)
    for label, flows, plain in (
        (
            "through the API (Workflow ... start() against enqueue_many())",
            runs["api_flows"],
            runs["api_plain"],
        ),
        ("the SQL calls alone, from the call", runs["flows"], runs["plain"]),
        ("the SQL calls alone, from the commit", runs["flows_after"], runs["plain_after"]),
    ):
        mf, mp = statistics.median(flows), statistics.median(plain)
        print(f"1 -> {args.width} -> 1 workflow against {args.width + 2} independent messages, {label}: "
              f"median {mf:.3f}s against {mp:.3f}s; ratio {mf / mp:.2f} "
              f"(runs: {[round(x, 3) for x in flows]} vs {[round(x, 3) for x in plain]})")  # fmt: skip
    print("where a workflow's time went (the SQL calls alone; medians, ms):")
    for key, what in PHASES.items():
        print(f"  {key:32s} {1000 * statistics.median(p[key] for p in runs['phases']):7.1f}  ({what})")
    calls = batch_calls(args.database_url, args.rounds, args.width)
    med = {k: 1000 * statistics.median(v) for k, v in calls.items()}
    print(f"per batch of 50, the worker's calls in series, summed over the drain (medians, ms): the steps' "
          f"dequeues {med['step_dequeue']:.1f} against the plain messages' {med['dequeue']:.1f}; the steps' acks "
          f"{med['step_ack']:.1f} against {med['ack']:.1f}; the root's ack, releasing {args.width} parts, "
          f"{med['release']:.1f}")  # fmt: skip
    chain, idle = chain_latency(args.database_url, args.chain, args.singles)
    mc, mi = statistics.median(chain), statistics.median(idle)
    print(f"chain of {args.chain}: parent ack -> child start median {mc * 1000:.1f} ms (p90 "
          f"{statistics.quantiles(chain, n=10)[-1] * 1000:.1f} ms); idle enqueue -> start median {mi * 1000:.1f} ms "
          f"(p90 {statistics.quantiles(idle, n=10)[-1] * 1000:.1f} ms); ratio {mc / mi:.2f}")  # fmt: skip
    if args.base:
        here, base = [], []
        for _ in range(args.rounds):
            base.append(drain(args.database_url, args.base, args.ab_messages))
            here.append(drain(args.database_url, core.ROOT, args.ab_messages))
        mh, mb = statistics.median(here), statistics.median(base)
        print(f"plain drain ({args.ab_messages} messages, dequeue + ack): this tree median {mh:.0f}/s, base "
              f"median {mb:.0f}/s, {100 * (mh / mb - 1):+.1f}% (runs {[round(x) for x in here]} vs {[round(x) for x in base]})")  # fmt: skip


if __name__ == "__main__":
    main()
