"""What a plan change costs, and whether dequeues keep flowing during it: ``python -m bench.plans``.

One plan ("tier") followed by ``--channels`` channels (default 100,000: idle channels of a
queue no worker serves, plus 50 busy ones), and a second plan ("premium") followed by 50 busy
channels. A dequeuer thread leases and acks batches of 10 from the busy queue the whole time
(its own connection, statements prepared as a worker's are). Each run:

* **before**: ``--window`` seconds of dequeue+ack with nothing changing;
* **change**: ``lonnymq_configure_plan_v1`` flips the tier's cap (5 <-> 6) and weight
  (1 <-> 2), so every one of its channels is rewritten, in one call; timed, and the dequeues
  that ran while it did are kept apart;
* **baseline**: in the same run, the same rows locked in id order and a bare ``UPDATE`` of
  their cap and weight (in a transaction rolled back): what writing that many channel rows
  costs on this machine now, whatever the function adds.

The table: the change's time (median, min, max over ``--runs``), the channels it rewrote, and
the dequeue+ack time per call (p50, p99) before vs during the change, with the messages leased
per second in each, from the tier's channels and from the premium ones (a change locks the
rows of the plan's channels until it commits: their dequeues skip them meanwhile, the other
channels' do not wait). The database (``--database-url``) is dropped and created again.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import psycopg

from django_lonnymq import sql

from . import core
from .sql_ab import build, migrations

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_plans"
BUSY = "busy"
IDLE = "idle"


class Dequeuer(threading.Thread):
    """Leases and acks batches of 10 from the busy queue; records (start, seconds, tier, premium)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.calls: list[tuple[float, float, int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with core.connect(self.url) as conn:
            while not self.stop.is_set():
                started = time.perf_counter()
                rows = core.dequeue(conn, BUSY, 10)
                core.ack(conn, rows)
                took = time.perf_counter() - started
                tier = sum(1 for r in rows if r[1].startswith("tier-"))
                self.calls.append((started, took, tier, len(rows) - tier))
                if not rows:
                    time.sleep(0.001)


def setup(conn: psycopg.Connection[Any], channels: int) -> None:
    conn.execute("SELECT lonnymq_configure_plan_v1('tier', 1, 5)")
    conn.execute("SELECT lonnymq_configure_plan_v1('premium', 3, 20)")
    conn.execute("SELECT lonnymq_set_default_plan_v1(%s, 'tier')", [IDLE])
    # The trigger gives every new channel its queue's default plan.
    conn.execute(
        "INSERT INTO lonnymq_channel (queue, name) SELECT %s, 'c' || g FROM generate_series(1, %s) g",
        [IDLE, channels - 50],
    )
    for n in range(50):
        conn.execute("SELECT lonnymq_configure_channel_v4(%s, %s, p_plan => 'tier')", [BUSY, f"tier-{n}"])
        conn.execute("SELECT lonnymq_configure_channel_v4(%s, %s, p_plan => 'premium')", [BUSY, f"premium-{n}"])
    conn.execute("VACUUM ANALYZE lonnymq_channel")


def refill(conn: psycopg.Connection[Any]) -> None:
    """Keep a backlog in every busy channel (the dequeuer never runs dry)."""
    names = [f"tier-{n}" for n in range(50)] + [f"premium-{n}" for n in range(50)]
    backlog = conn.execute(
        "SELECT count(*) FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id WHERE c.queue = %s",
        [BUSY],
    ).fetchone()
    if backlog and backlog[0] < 20_000:
        core.fill(conn, BUSY, 40_000, names)


def percentile(values: list[float], p: float) -> float:
    return core.percentile(values, p) if values else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=None, help=f"default {DEFAULT_URL}")
    parser.add_argument("--channels", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--window", type=float, default=2.0, help="seconds of dequeues before each change")
    args = parser.parse_args(argv)
    url = args.database_url or DEFAULT_URL
    core.log(f"building {url} at {migrations()[-1]}")
    build(url, migrations()[-1])
    with core.connect(url) as conn:
        setup(conn, args.channels)
        refill(conn)
        following = conn.execute(
            "SELECT count(*) FROM lonnymq_channel c JOIN lonnymq_plan p ON p.id = c.plan_id WHERE p.name = 'tier'"
        ).fetchone()
        core.log(f"{following[0] if following else 0:,} channels follow plan tier")
        dequeuer = Dequeuer(url)
        dequeuer.start()
        changes: list[tuple[float, float, int]] = []  # (start, seconds, channels rewritten)
        baselines: list[float] = []
        statement = sql.query("configure_plan")
        try:
            for run in range(args.runs):
                refill(conn)
                time.sleep(args.window)
                params = {"name": "tier", "weight": 2 - run % 2, "max_concurrency": 6 - run % 2, "unlimited": False,
                          "release_interval_ms": None, "rate_count": None, "rate_period_ms": None,
                          "rate_burst": None, "no_rate": False}  # fmt: skip
                started = time.perf_counter()
                row = conn.execute(statement, params).fetchone()
                took = time.perf_counter() - started
                changes.append((started, took, int(row[0]) if row else 0))
                with conn.transaction(force_rollback=True):
                    started = time.perf_counter()
                    # In id order first, as the function does (acks give slots back in it).
                    conn.execute(
                        "SELECT 1 FROM lonnymq_channel c WHERE c.plan_id = (SELECT p.id FROM lonnymq_plan p"
                        " WHERE p.name = 'tier') ORDER BY c.id FOR NO KEY UPDATE"
                    )
                    conn.execute(
                        "UPDATE lonnymq_channel c SET max_concurrency = c.max_concurrency + 1, weight = c.weight"
                        " WHERE c.plan_id = (SELECT p.id FROM lonnymq_plan p WHERE p.name = 'tier')"
                    )
                    baselines.append(time.perf_counter() - started)
                core.log(f"run {run + 1}: the change rewrote {changes[-1][2]:,} channels in {took:.2f} s")
        finally:
            dequeuer.stop.set()
            dequeuer.join()
        drift = conn.execute("SELECT count(*) FROM lonnymq_check_limits_v1()").fetchone()

    during = [c for c in dequeuer.calls if any(s <= c[0] < s + t for s, t, _ in changes)]
    before = [c for c in dequeuer.calls if any(s - args.window <= c[0] < s for s, _, _ in changes)]
    seconds = [t for _, t, _ in changes]

    def rates(calls: list[tuple[float, float, int, int]], window: float) -> tuple[float, float]:
        return sum(c[2] for c in calls) / window, sum(c[3] for c in calls) / window

    before_window = args.window * len(changes)
    during_window = sum(seconds)
    tier_before, premium_before = rates(before, before_window)
    tier_during, premium_during = rates(during, during_window)
    print()
    print(f"plan change over {changes[0][2]:,} channels, {len(changes)} runs  (check: {drift[0] if drift else '?'} drift)")
    print(f"  {'':<32}{'median':>9}{'min':>9}{'max':>9}")
    print(f"  {'configure_plan (one call)':<32}{core.median(seconds):>8.2f}s{min(seconds):>8.2f}s{max(seconds):>8.2f}s")
    print(f"  {'baseline: bare UPDATE, same rows':<32}{core.median(baselines):>8.2f}s{min(baselines):>8.2f}s"
          f"{max(baselines):>8.2f}s")  # fmt: skip
    ratios = [c / b for c, b in zip(seconds, baselines, strict=True)]
    print(f"  {'ratio (same run)':<32}{core.median(ratios):>8.2f}x")
    print()
    print(f"  {'dequeue+ack of 10':<22}{'calls':>8}{'p50 ms':>10}{'p99 ms':>10}{'tier msg/s':>12}{'premium msg/s':>15}")
    for label, calls, tier, premium in (
        ("before the change", before, tier_before, premium_before),
        ("during the change", during, tier_during, premium_during),
    ):
        times = [c[1] * 1000 for c in calls]
        print(f"  {label:<22}{len(calls):>8}{percentile(times, 50):>10.2f}{percentile(times, 99):>10.2f}"
              f"{tier:>12.0f}{premium:>15.0f}")  # fmt: skip
    print()
    for key, value in {**core.machine_facts()}.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
