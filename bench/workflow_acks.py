"""A workflow's acks, timed from one connection: ``python -m bench.workflow_acks``.

``--workflows`` 1 -> ``--width`` -> 1 workflows, one after the other in one session (so that
plpgsql's generic plans are in use after the first few): the start, the root's ack (which
releases the parts), the parts dequeued and acked 50 at a time, the merge step, then the
workflow deleted (its rows stay dead: autovacuum is off on the bench machine). Prints, per
workflow, the root's ack, the median ack of 50 parts and the sum of the parts' acks; then the
medians over the workflows after the first. Run it on two trees against their own databases
and compare (docs/workflows.md, "Measured", "After 0036").

``--calls N`` times instead, on one started workflow, the root's release, the root's ack and
an enqueue of as many plain messages, each in a transaction rolled back, N times alternating.

The database is ``--database-url`` (default postgres://postgres@127.0.0.1:5432/lq_bench_workflow_acks);
it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_workflow_acks"

START = """
SELECT lonnymq_workflow_start_v1('bench', 'tenant-0',
  ARRAY['root'] || (SELECT array_agg('p' || i) FROM generate_series(1, %(w)s) i) || ARRAY['merge'],
  array_fill('bench'::text, ARRAY[%(n)s]), array_fill('tenant-0'::text, ARRAY[%(n)s]),
  array_fill('{"x": 1}'::jsonb, ARRAY[%(n)s]), array_fill(0::bigint, ARRAY[%(n)s]), array_fill(5, ARRAY[%(n)s]),
  array_fill(1, ARRAY[%(w)s]) || (SELECT array_agg(i) FROM generate_series(2, %(w)s + 1) i),
  (SELECT array_agg(i) FROM generate_series(2, %(w)s + 1) i) || array_fill(%(w)s + 2, ARRAY[%(w)s]),
  NULL, NULL, NULL, NULL, 50)
"""
DEQUEUE = "SELECT id, lease_token FROM lonnymq_dequeue_v1('bench', %s, 60000, 'bench', 50, 100)"
ACK = "SELECT lonnymq_workflow_ack_v2(%s::bigint[], %s::uuid[], array_fill('{}'::jsonb, ARRAY[%s]), 50)"


def one(conn, width: int) -> tuple[float, float, float]:  # type: ignore[no-untyped-def]
    conn.execute(START, {"w": width, "n": width + 2})
    rows = conn.execute(DEQUEUE, [1]).fetchall()
    start = time.perf_counter()
    conn.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows], len(rows)])
    root = time.perf_counter() - start
    parts, acked = [], 0
    while acked < width:
        rows = conn.execute(DEQUEUE, [min(50, width - acked)]).fetchall()
        if not rows:
            raise RuntimeError(f"only {acked} of {width} parts were released")
        start = time.perf_counter()
        conn.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows], len(rows)])
        parts.append(time.perf_counter() - start)
        acked += len(rows)
    rows = conn.execute(DEQUEUE, [1]).fetchall()  # the merge step
    conn.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows], len(rows)])
    if conn.execute("SELECT count(*) FROM lonnymq_workflow WHERE state <> 'succeeded'").fetchone()[0]:
        raise RuntimeError("the workflow did not succeed")
    conn.execute("DELETE FROM lonnymq_workflow")
    return root, statistics.median(parts), sum(parts)


CALLS = {
    "lonnymq_workflow_release_v2 of the parts": "SELECT lonnymq_workflow_release_v2(%(parts)s::bigint[], 50)",
    "the root's ack (lonnymq_workflow_ack_v2, releases the parts)": (
        "SELECT lonnymq_workflow_ack_v2(ARRAY[%(root)s]::bigint[], ARRAY[%(token)s]::uuid[], ARRAY['{}']::jsonb[], 50)"
    ),
    "lonnymq_enqueue_many_v2 of as many messages": (
        "SELECT lonnymq_enqueue_many_v2('bench', array_fill('tenant-0'::text, ARRAY[%(w)s]),"
        " array_fill('{\"x\": 1}'::jsonb, ARRAY[%(w)s]))"
    ),
}


def calls(conn, width: int, times: int) -> None:  # type: ignore[no-untyped-def]
    """Each call of CALLS on one started workflow, in a transaction rolled back, the calls
    alternating, ``times`` times; the median and range of all but the first."""
    wf = conn.execute(START, {"w": width, "n": width + 2}).fetchone()[0]
    root, token = conn.execute(DEQUEUE, [1]).fetchone()
    parts = [r[0] for r in conn.execute("SELECT id FROM lonnymq_workflow_step WHERE workflow_id = %s AND id <> %s"
                                        " AND parents <> ARRAY[]::bigint[] AND children <> ARRAY[]::bigint[]",
                                        [wf, root])]  # fmt: skip
    params = {"parts": parts, "root": root, "token": token, "w": width}
    times_of: dict[str, list[float]] = {name: [] for name in CALLS}
    for _ in range(times):
        for name, query in CALLS.items():
            conn.execute("BEGIN")
            start = time.perf_counter()
            conn.execute(query, params)
            times_of[name].append(time.perf_counter() - start)
            conn.execute("ROLLBACK")
    print("| call | median (ms) | range (ms) |")
    print("| --- | --- | --- |")
    for name, values in times_of.items():
        later = values[1:] or values
        print(
            f"| {name} | {statistics.median(later) * 1000:.1f} | {min(later) * 1000:.1f} to {max(later) * 1000:.1f} |"
        )
    conn.execute("DELETE FROM lonnymq_workflow")
    conn.execute("DELETE FROM lonnymq_message")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("LONNYMQ_BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--workflows", type=int, default=8)
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=0, help="time the root's calls this many times instead")
    args = parser.parse_args()
    core.recreate_database(args.database_url)
    print(" ".join(f"{k}={v}" for k, v in core.machine_facts().items()))
    conn = core.connect(args.database_url)
    if args.calls:
        try:
            calls(conn, args.width, args.calls)
        finally:
            conn.close()
        return
    results = []
    try:
        print("| workflow | root's ack (ms) | ack of 50 parts, median (ms) | parts' acks, sum (ms) |")
        print("| --- | --- | --- | --- |")
        for i in range(args.workflows):
            root, part, total = one(conn, args.width)
            results.append((root, part, total))
            print(f"| {i} | {root * 1000:.1f} | {part * 1000:.2f} | {total * 1000:.1f} |", flush=True)
    finally:
        conn.close()
    later = results[1:] or results
    print(
        f"| median after the first | {statistics.median(r[0] for r in later) * 1000:.1f} | "
        f"{statistics.median(r[1] for r in later) * 1000:.2f} | {statistics.median(r[2] for r in later) * 1000:.1f} |"
    )


if __name__ == "__main__":
    main()
