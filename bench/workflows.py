"""Workflows: ``python -m bench.workflows``.

1. **Fan-out/fan-in**: a 1 -> 1,000 -> 1 workflow against 1,002 independent messages, the same
   no-op handler (queue ``bench``), the same running worker (``--concurrency 4``): wall time
   from the call that starts the workflow (or enqueues the messages) until the last step is
   done, and from that call's commit (its return) until then. The start's arrays go in
   binary, as ``Workflow.start()`` sends them.
2. **Chain latency**: a chain of ``--chain`` steps (queue ``bench_step``, no-op): from a
   parent's ack (the child's ``released_at``, written by that ack) to the child's start,
   against the enqueue-to-start latency of single messages enqueued one at a time into an
   idle worker (queue ``bench_latency``).
3. **Plain messages pay nothing**: an A/B of draining ``--ab-messages`` plain messages (dequeue
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


def wait_empty(conn, what: str, timeout: float = 300) -> float:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if conn.execute(what).fetchone()[0]:
            return time.perf_counter()
        time.sleep(0.005)
    raise RuntimeError(f"not done in {timeout}s: {what}")


def fan(url: str, rounds: int, width: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """Wall times from the call that starts the work (the workflow's start, the enqueue) to
    the last step done, and from its commit (the call's return) to the last step done."""
    conn = core.connect(url)
    worker = core.start_worker(url, "bench", "--concurrency", "4", "--batch-size", "50")
    flows, plain, flows_after, plain_after = [], [], [], []
    # The arrays in binary, as Workflow.start() sends them (db.rows(..., arrays=True)).
    start_sql = sql.binary_arrays(sql.query("workflow_start"))
    steps = [("root", [])] + [(f"p{i}", [1]) for i in range(width)] + [("merge", list(range(2, width + 2)))]
    done_flow = "SELECT count(*) = 0 FROM lonnymq_workflow WHERE state <> 'succeeded'"
    done_plain = "SELECT NOT EXISTS (SELECT 1 FROM lonnymq_message)"
    try:
        worker.wait_for("lonnymq worker")
        time.sleep(2)  # its LISTEN and first dequeue
        for _ in range(rounds):
            start = time.perf_counter()
            conn.execute(start_sql, start_params("bench", steps))
            committed = time.perf_counter()
            end = wait_empty(conn, done_flow)
            flows.append(end - start)
            flows_after.append(end - committed)
            conn.execute("DELETE FROM lonnymq_workflow")
            start = time.perf_counter()
            conn.execute(
                "SELECT lonnymq_enqueue_many_v1('bench', array_fill('tenant-0'::text, ARRAY[%s]),"
                " array_fill(%s::jsonb, ARRAY[%s]), NULL, NULL, NULL, NULL, NULL, 5, 1000, 50)",
                [width + 2, core.PAYLOAD_TEXT, width + 2],
            )
            committed = time.perf_counter()
            end = wait_empty(conn, done_plain)
            plain.append(end - start)
            plain_after.append(end - committed)
    finally:
        worker.stop()
        conn.close()
    return flows, plain, flows_after, plain_after


def chain_latency(url: str, length: int, singles: int) -> tuple[list[float], list[float]]:
    conn = core.connect(url)
    path = Path(tempfile.mkstemp(prefix="lq-bench-chain-")[1])
    worker = core.start_worker(
        url, "bench_step", "--queue", "bench_latency", "--concurrency", "4", LONNYMQ_BENCH_LATENCY_FILE=str(path)
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
        starts = {int(a): float(b) for a, b in (line.split() for line in path.read_text().split("\n") if line)}
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
    flows, plain, flows_after, plain_after = fan(args.database_url, args.rounds, args.width)
    mf, mp = statistics.median(flows), statistics.median(plain)
    print(f"1 -> {args.width} -> 1 workflow: median {mf:.3f}s; {args.width + 2} independent messages: "
          f"median {mp:.3f}s; ratio {mf / mp:.2f} (runs: {[round(x, 3) for x in flows]} vs {[round(x, 3) for x in plain]})")  # fmt: skip
    mf, mp = statistics.median(flows_after), statistics.median(plain_after)
    print(f"  the same from the commit of the start (of the enqueue): median {mf:.3f}s against {mp:.3f}s; "
          f"ratio {mf / mp:.2f} (runs: {[round(x, 3) for x in flows_after]} vs {[round(x, 3) for x in plain_after]})")  # fmt: skip
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
