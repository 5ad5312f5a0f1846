"""Where a dequeue's buffers go, small queue next to big: ``python -m bench.drain_buffers``.

Two filled databases (``--setup`` fills them as bench.scale does: channel rows, then
``enqueue_many`` calls of 2,000 round robin, no VACUUM, the server's autovacuum is off):
the baseline ``--base`` (100,000 messages over 1,000 channels) and the big one ``--big``
(3,000,000 over 100,000). On each:

1. Warm-up: dequeues of 100 (each acked) until the bulk enqueue's wake-up marks are
   applied, and ``--warmup`` more.
2. A ``CHECKPOINT``, then ``--dequeues`` dequeues of 100, each acked, with auto_explain
   (``log_nested_statements``, ``log_buffers``, ``log_wal``, no timing) sending every plan
   to this client: shared blocks hit / read / dirtied / written and WAL records / full
   page images / bytes of each dequeue and each ack (buffer counts do not depend on the
   machine's load), split by the relation each plan node reads (a node's own blocks, its
   children's taken off) and by the statement of the function.
3. ``--drains`` drains of ``--drain`` messages by ``--workers`` worker processes (as in
   bench.scale), each from the database's copy after the warm-up (and an ANALYZE of the
   message table, as autovacuum would have run), the variants alternating: the small queue,
   the big one, the big one without the dashboard's samples (``LQ_BENCH_SAMPLE_INTERVAL=off``),
   with ``--ab-sql`` run after the restore, and migrated and drained by ``--other-tree`` (a
   checkout of another branch). The median rate, its ratio to the small queue's, and the
   blocks the database's sessions hit and read per message, by relation.

The figures answer issue 29's question: what a dequeue costs at 100,000 channels that it
does not at 1,000 (docs/performance.md, "The drain at 3M, measured").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg

from . import core, scale

BLOCKS = ("Shared Hit Blocks", "Shared Read Blocks", "Shared Dirtied Blocks", "Shared Written Blocks")
WAL = ("WAL Records", "WAL FPI", "WAL Bytes")
KEYS = BLOCKS + WAL
SHORT = {
    "Shared Hit Blocks": "hit",
    "Shared Read Blocks": "read",
    "Shared Dirtied Blocks": "dirtied",
    "Shared Written Blocks": "written",
    "WAL Records": "WAL rec",
    "WAL FPI": "WAL FPI",
    "WAL Bytes": "WAL B",
}


def setup(url: str, messages: int, channels: int) -> None:
    core.recreate_database(url)
    conn = core.connect(url)
    conn.execute("SELECT lonnymq_pause_queue_v1(%s, false)", [scale.QUEUE])
    names = [f"tenant-{i}" for i in range(channels)]
    conn.execute(
        "INSERT INTO lonnymq_channel (queue, name) SELECT %s, n FROM unnest(%s::text[]) AS u(n)",
        [scale.QUEUE, names],
    )
    conn.execute("VACUUM ANALYZE lonnymq_channel")
    t0 = time.perf_counter()
    rate = scale.fill(conn, names, 0, messages)
    core.log(
        f"  {url}: {messages:,} over {channels:,} in {time.perf_counter() - t0:,.0f} s ({rate:,.0f} msg/s)"
    )
    conn.close()


def restore(url: str) -> None:
    """The database again as the fill left it, from its copy ``<name>_t`` (made by --setup)."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    name = params["dbname"]
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{name}_t" STRATEGY FILE_COPY')


def copy(url: str) -> None:
    params = psycopg.conninfo.conninfo_to_dict(url)
    name = params["dbname"]
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}_t"')
        conn.execute(f'CREATE DATABASE "{name}_t" TEMPLATE "{name}" STRATEGY FILE_COPY')


def warm_up(conn: psycopg.Connection[Any], warmup: int) -> None:
    """Dequeues of 100 (acked) until the bulk enqueue's wake-up marks are applied, and
    ``warmup`` more; then VACUUM of the channel and mark tables, as the workers do."""
    done = 0
    while (
        conn.execute("SELECT EXISTS (SELECT 1 FROM lonnymq_wake WHERE queue = %s)", [scale.QUEUE]).fetchone()[
            0
        ]
        or done < warmup
    ):
        core.ack(conn, core.dequeue(conn, scale.QUEUE, 100))
        done += 1
    conn.execute("VACUUM lonnymq_channel")
    conn.execute("VACUUM lonnymq_wake")
    # What autovacuum's analyze would have done after the fill (the server here runs without
    # it): without statistics the planner takes the message table for empty.
    conn.execute("ANALYZE lonnymq_message")


STATIO = """
SELECT relname, heap_blks_hit + coalesce(idx_blks_hit, 0), heap_blks_read + coalesce(idx_blks_read, 0)
  FROM pg_statio_user_tables
UNION ALL
SELECT indexrelname, idx_blks_hit, idx_blks_read FROM pg_statio_user_indexes
"""


def statio(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {r[0]: (int(r[1]), int(r[2])) for r in conn.execute(STATIO).fetchall()}


def timed_drain(
    url: str,
    workers: int,
    slice_: int,
    warmup: int,
    sql_file: str | None = None,
    sampler: bool = True,
    root: Path = core.ROOT,
) -> dict[str, Any]:
    """A drain of the restored database after the warm-up: its rate, and the blocks the
    database's sessions hit and read per message meanwhile (by relation). ``sql_file`` is
    run after the restore (the B of an A/B of the SQL); ``sampler`` false runs the workers
    without the dashboard's samples; ``root``: another source tree, whose migrations are
    applied after the restore and whose workers drain."""
    restore(url)
    if root != core.ROOT:
        subprocess.run(
            [sys.executable, str(root / "manage.py"), "migrate", "-v", "0", "--skip-checks"],
            cwd=root,
            env=core.worker_env(url, root),
            check=True,
        )
    conn = core.connect(url)
    if sql_file:
        with conn.transaction():
            conn.execute(Path(sql_file).read_text())
    warm_up(conn, warmup)
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.1)
    before = statio(conn)
    db0 = conn.execute(
        "SELECT blks_hit, blks_read, xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    deleted0 = conn.execute(
        "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'lonnymq_message'"
    ).fetchone()[0]
    if sampler:
        os.environ.pop("LQ_BENCH_SAMPLE_INTERVAL", None)
    else:
        os.environ["LQ_BENCH_SAMPLE_INTERVAL"] = "off"
    try:
        rate = scale.drain(url, conn, workers, slice_, root)
    finally:
        os.environ.pop("LQ_BENCH_SAMPLE_INTERVAL", None)
    time.sleep(1.5)  # the workers' backends flush their counters as they exit
    conn.execute("SELECT pg_stat_force_next_flush()")
    time.sleep(1.1)
    after = statio(conn)
    db1 = conn.execute(
        "SELECT blks_hit, blks_read, xact_commit FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    deleted = (
        conn.execute(
            "SELECT n_tup_del FROM pg_stat_user_tables WHERE relname = 'lonnymq_message'"
        ).fetchone()[0]
        - deleted0
    )
    conn.close()
    per = max(deleted, 1)
    rels = {
        k: ((after[k][0] - before.get(k, (0, 0))[0]) / per, (after[k][1] - before.get(k, (0, 0))[1]) / per)
        for k in after
    }
    return {
        "rate": rate,
        "hit": (db1[0] - db0[0]) / per,
        "read": (db1[1] - db0[1]) / per,
        "rels": rels,
        "deleted": deleted,
    }


def own(node: dict[str, Any], ctes: dict[str, dict[str, Any]]) -> dict[str, float]:
    """A plan node's own counts: its children's are included in its figures. A CTE's plan
    is listed under the top node but runs (and is counted) in the CTE Scan that reads it."""
    out = {k: float(node.get(k, 0)) for k in KEYS}
    below = [c for c in node.get("Plans", []) if not str(c.get("Subplan Name", "")).startswith("CTE ")]
    if node.get("Node Type") == "CTE Scan" and node.get("CTE Name") in ctes:
        below.append(ctes[node["CTE Name"]])
    for child in below:
        for k in KEYS:
            out[k] -= float(child.get(k, 0))
    return out


def ctes_of(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        str(n["Subplan Name"])[4:]: n for n in walk(plan) if str(n.get("Subplan Name", "")).startswith("CTE ")
    }


def walk(node: dict[str, Any]):
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


def target(node: dict[str, Any]) -> str:
    kind = node.get("Node Type", "")
    if kind == "ModifyTable":
        kind = node.get("Operation", kind)
    if "Index Name" in node:
        return f"{node['Index Name']} ({kind})"
    if "Relation Name" in node:
        return f"{node['Relation Name']} ({kind})"
    return kind


STEP = (
    ("FOR NO KEY UPDATE OF c SKIP LOCKED", "1 pick channels"),
    ("FOR UPDATE OF mm SKIP LOCKED", "2 candidate messages"),
    ("UPDATE lonnymq_message m", "3 lease (update messages)"),
    ("SELECT pg_catalog.array_agg(n.channel_id)", "4 next heads"),
    ("SELECT mm.dequeue_at", "4 second look (parking)"),
    ("UPDATE lonnymq_channel c", "5 write channels"),
    ("lonnymq_queue_config", "0 queue row"),
    ("lonnymq_wake", "0 marks"),
    ("DELETE FROM lonnymq_message", "ack: delete"),
)


def step(query: str) -> str:
    for needle, name in STEP:
        if needle in query:
            return name
    return "other: " + " ".join(query.split())[:50]


class Recorder:
    """Collects auto_explain's plans sent to this client as notices."""

    def __init__(self) -> None:
        self.plans: list[dict[str, Any]] = []

    def __call__(self, diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        at = text.find("{")
        if "plan:" in text and at >= 0:
            self.plans.append(json.loads(text[at:]))

    def take(self) -> list[dict[str, Any]]:
        plans, self.plans = self.plans, []
        return plans


def explain_on(conn: psycopg.Connection[Any]) -> Recorder:
    conn.execute("LOAD 'auto_explain'")
    for name, value in (
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_wal", "on"),
        ("auto_explain.log_timing", "off"),
        ("auto_explain.log_nested_statements", "on"),
        ("auto_explain.log_format", "json"),
        ("auto_explain.log_level", "notice"),
        ("client_min_messages", "notice"),
    ):
        conn.execute(f"SET {name} = '{value}'")
    recorder = Recorder()
    conn.add_notice_handler(recorder)
    return recorder


def top(plans: list[dict[str, Any]], needle: str) -> dict[str, float]:
    """The top-level statement's totals (the last plan logged: nested ones end first)."""
    for plan in reversed(plans):
        if needle in plan["Query Text"] and "lonnymq_" in plan["Query Text"]:
            node = plan["Plan"]
            return {k: float(node.get(k, 0)) for k in KEYS}
    raise RuntimeError(f"no plan for {needle}")


def measure(url: str, dequeues: int, warmup: int) -> dict[str, Any]:
    restore(url)
    conn = core.connect(url)
    warm_up(conn, warmup)
    conn.execute("CHECKPOINT")
    recorder = explain_on(conn)
    deq = defaultdict(float)
    ack = defaultdict(float)
    by_target: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_step: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    messages = 0
    for _ in range(dequeues):
        rows = core.dequeue(conn, scale.QUEUE, 100)
        plans = recorder.take()
        core.ack(conn, rows)
        plans_ack = recorder.take()
        messages += len(rows)
        for k, v in top(plans, "lonnymq_dequeue_v1").items():
            deq[k] += v
        for k, v in top(plans_ack, "lonnymq_ack_v1").items():
            ack[k] += v
        for plan in plans + plans_ack:
            query = plan["Query Text"]
            if "lonnymq_dequeue_v1(" in query or "lonnymq_ack_v1(" in query:
                continue  # the top-level statements: their totals include every nested one
            ctes = ctes_of(plan["Plan"])
            for node in walk(plan["Plan"]):
                counts = own(node, ctes)
                for k, v in counts.items():
                    by_target[target(node)][k] += v
                    by_step[step(query)][k] += v
    conn.close()
    n = float(dequeues)
    return {
        "dequeue": {k: v / n for k, v in deq.items()},
        "ack": {k: v / n for k, v in ack.items()},
        "messages": messages / n,
        "by_target": {t: {k: v / n for k, v in c.items()} for t, c in by_target.items()},
        "by_step": {s: {k: v / n for k, v in c.items()} for s, c in by_step.items()},
    }


def sizes(url: str) -> dict[str, float]:
    conn = core.connect(url)
    out = {}
    for rel in (
        "lonnymq_message",
        "lonnymq_message_ready_idx",
        "lonnymq_message_pkey",
        "lonnymq_message_channel_idx",
        "lonnymq_message_lease_idx",
        "lonnymq_channel",
        "lonnymq_channel_eligible_idx",
    ):
        out[rel] = conn.execute("SELECT pg_relation_size(%s::regclass)", [rel]).fetchone()[0] / 2**20
    conn.close()
    return out


def table(
    title: str, rows: dict[str, dict[str, float]], heads: list[str], results: list[dict[str, Any]]
) -> None:
    print(f"\n{title}")
    print(f"{'':<58}" + "".join(f"{h:>26}" for h in heads))
    print(f"{'':<58}" + "".join(f"{'hit/read/dirtied/written':>26}" for _ in heads))
    for name in rows:
        cells = []
        for r in results:
            c = r.get(name)
            cells.append(
                "-"
                if c is None
                else f"{c['Shared Hit Blocks']:.0f}/{c['Shared Read Blocks']:.0f}/"
                f"{c['Shared Dirtied Blocks']:.1f}/{c['Shared Written Blocks']:.1f}"
            )
        print(f"{name[:57]:<58}" + "".join(f"{c:>26}" for c in cells))


def explained(urls: dict[str, str], heads: list[str], args: argparse.Namespace) -> None:
    results = [measure(urls["base"], args.dequeues, args.warmup)]
    results.append(measure(urls["big"], args.dequeues, args.warmup))
    size = [sizes(urls[h]) for h in heads]
    print(f"load after the explained dequeues: {core.machine_facts().get('load')}")
    print(
        f"\nper dequeue of 100 (messages leased, mean: {results[0]['messages']:.0f} / {results[1]['messages']:.0f})"
    )
    print(f"{'':<30}" + "".join(f"{h:>12}" for h in heads) + f"{'ratio':>8}")
    for part in ("dequeue", "ack"):
        for k in KEYS:
            a, b = results[0][part].get(k, 0), results[1][part].get(k, 0)
            ratio = f"{b / a:.2f}x" if a else ""
            print(f"{part + ' ' + SHORT[k]:<30}{a:>12,.1f}{b:>12,.1f}{ratio:>8}")
    for i, h in enumerate(heads):
        r = results[i]
        wal_b = (r["dequeue"].get("WAL Bytes", 0) + r["ack"].get("WAL Bytes", 0)) / max(r["messages"], 1)
        fpi = (r["dequeue"].get("WAL FPI", 0) + r["ack"].get("WAL FPI", 0)) / max(r["messages"], 1)
        print(f"{h}: WAL {wal_b:,.0f} B per message, {fpi:.2f} full page images per message")
    names = sorted({t for r in results for t in r["by_step"]})
    table("per dequeue+ack, by statement", {n: {} for n in names}, heads, [r["by_step"] for r in results])
    names = sorted(
        {t for r in results for t in r["by_target"]},
        key=lambda t: (
            -max(
                r["by_target"].get(t, {}).get("Shared Hit Blocks", 0)
                + r["by_target"].get(t, {}).get("Shared Read Blocks", 0)
                for r in results
            )
        ),
    )
    table(
        "per dequeue+ack, by plan node (its own blocks)",
        {n: {} for n in names},
        heads,
        [r["by_target"] for r in results],
    )
    print("\nsizes, MB")
    for rel in size[0]:
        print(f"{rel:<40}{size[0][rel]:>10,.1f}{size[1][rel]:>10,.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.drain_buffers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--base", default="postgres://postgres@127.0.0.1:5432/lq_bench_drain_base")
    parser.add_argument("--big", default="postgres://postgres@127.0.0.1:5432/lq_bench_drain_big")
    parser.add_argument("--base-size", default="100000/1000", help="messages/channels")
    parser.add_argument("--big-size", default="3000000/100000", help="messages/channels")
    parser.add_argument("--setup", action="store_true", help="recreate and fill both databases")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--dequeues", type=int, default=100, help="dequeues of 100 explained, each database")
    parser.add_argument("--drains", type=int, default=3)
    parser.add_argument("--drain", type=int, default=20_000, help="messages a drain takes, timed")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--no-explain", action="store_true", help="drains only")
    parser.add_argument(
        "--ab-sql", help="a SQL file run on the big database after each restore: drains of it as 'big+sql'"
    )
    parser.add_argument(
        "--other-tree",
        type=Path,
        help="another checkout: drains of the big database migrated and drained by it",
    )
    parser.add_argument(
        "--no-sampler-column", action="store_true", help="no drains of the big database without samples"
    )
    args = parser.parse_args(argv)
    urls = {"base": args.base, "big": args.big}
    if args.setup:
        for name, size in (("base", args.base_size), ("big", args.big_size)):
            messages, channels = (int(x) for x in size.split("/"))
            setup(urls[name], messages, channels)
            copy(urls[name])
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=core.ROOT, capture_output=True, text=True
    ).stdout.strip()
    with core.connect(args.base) as conn:
        print(f"machine: {core.machine_facts()}; server: {core.server_facts(conn)}")
    print(f"commit {commit}; base {args.base_size} ({args.base}), big {args.big_size} ({args.big})")
    heads = ["base", "big"]
    if not args.no_explain:
        explained(urls, heads, args)
    if args.drains:
        here = core.ROOT
        variants = {"base": (urls["base"], None, True, here), "big": (urls["big"], None, True, here)}
        if not args.no_sampler_column:
            variants["big, no samples"] = (urls["big"], None, False, here)
        if args.ab_sql:
            variants["big+sql"] = (urls["big"], args.ab_sql, True, here)
        if args.other_tree:
            variants["big, other tree"] = (urls["big"], None, True, args.other_tree.resolve())
        runs: dict[str, list[dict[str, Any]]] = {h: [] for h in variants}
        loads = []
        for _ in range(args.drains):
            for h, (url, sql_file, sampler, root) in variants.items():
                runs[h].append(
                    timed_drain(url, args.workers, args.drain, args.warmup, sql_file, sampler, root)
                )
                loads.append(core.machine_facts().get("load"))
                r = runs[h][-1]
                core.log(
                    f"  drain {h}: {r['rate']:,.0f} msg/s, {r['hit']:.1f} hit {r['read']:.1f} read per message"
                )
        print(
            f"\ndrains of {args.drain:,} by {args.workers} workers, each from the restored fill (loads: {loads})"
        )
        base_rate = core.median([r["rate"] for r in runs["base"]])
        for h in variants:
            rates = [r["rate"] for r in runs[h]]
            hits = [r["hit"] for r in runs[h]]
            reads = [r["read"] for r in runs[h]]
            print(
                f"{h:<16} median {core.median(rates):>8,.0f} msg/s ({core.median(rates) / base_rate:.2f}x)"
                f"  runs {[round(x) for x in rates]};"
                f" per message: {core.median(hits):.1f} hit, {core.median(reads):.2f} read (database, medians)"
            )
        print("\nper message during the drains, by relation (medians): hit / read")
        rels = sorted(
            {k for h in variants for r in runs[h] for k in r["rels"]},
            key=lambda k: -max(core.median([r["rels"].get(k, (0, 0))[0] for r in runs[h]]) for h in variants),
        )
        print(f"{'':<40}" + "".join(f"{h:>22}" for h in variants))
        for k in rels:
            cells = []
            for h in variants:
                hit = core.median([r["rels"].get(k, (0, 0))[0] for r in runs[h]])
                read = core.median([r["rels"].get(k, (0, 0))[1] for r in runs[h]])
                cells.append(f"{hit:.2f} / {read:.2f}")
            if any(c != "0.00 / 0.00" for c in cells):
                print(f"{k:<40}" + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
