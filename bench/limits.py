"""What weights, token buckets and queue-wide limits cost a dequeue: ``python -m bench.limits``.

Dequeue of 100 messages over 1,000 backlogged channels (then the ack of the batch), measured
in one run on three setups:

* **base**: the SQL before these limits (``--base``, default the migration before
  ``0010_weights_and_token_buckets``);
* **live, no limit set**: the live SQL, no weight, bucket or queue limit configured;
* **live, all limits**: the live SQL with every channel weighted (1, 2 or 3) and given a token
  bucket, and the queue a concurrency cap and a bucket: all set generously (nothing waits for
  a token or a slot), so the figure is the machinery's cost, not throttling. With ``--costs``
  its messages cost 1, 2 or 3 tokens each (``enqueue(cost=k)``): what spending costs costs.

Each setup has its own database (``--database-url`` with ``_base``, ``_live`` and ``_limits``
appended; dropped and created again), so no setup's churn bloats another's tables. Each
round fills the three alike, then drains them call by call in turn, the order rotating each
call, so a load spike on a shared machine hits all three. Each figure is the median over
rounds of the round's median time per call; ratios are against base in the same round,
median over rounds. Targets: no limit set within 5% of base, all limits at most 1.3x.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from . import core
from .sql_ab import build, migrations, with_suffix

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_limits"
QUEUE = "q"
CHANNELS = [f"t{i}" for i in range(1000)]
FIRST_MIGRATION = "0010_weights_and_token_buckets"
SETUPS = ("base", "live, no limit set", "live, all limits")


def reset(conn: psycopg.Connection[Any], live: bool) -> None:
    tables = "lonnymq_message, lonnymq_dedup, lonnymq_dead_message, lonnymq_channel, lonnymq_wake"
    conn.execute(f"TRUNCATE {tables}" + (", lonnymq_queue_config" if live else ""))


def set_all_limits(conn: psycopg.Connection[Any]) -> None:
    for i, name in enumerate(CHANNELS):
        conn.execute(
            "SELECT lonnymq_configure_channel_v3(%s, %s, NULL, true, NULL, NULL, %s, 1000, 1000, 100, false)",
            [QUEUE, name, 1 + i % 3],
        )
    conn.execute(
        "SELECT lonnymq_configure_queue_v1(%s, 100000, false, 1000000, 1000, 100000, false)", [QUEUE]
    )


def one_round(
    conns: dict[str, psycopg.Connection[Any]], total: int, first: int, costs: bool = False
) -> dict[str, tuple[float, float]]:
    """Fill the setups alike, then drain them call by call in turn; median seconds per
    dequeue and per ack of each."""
    for name, conn in conns.items():
        reset(conn, live=name != "base")
        if name == "live, all limits":
            set_all_limits(conn)
        core.fill(conn, QUEUE, total, CHANNELS)
        if costs and name == "live, all limits":
            conn.execute("UPDATE lonnymq_message SET cost = 1 + id % 3")
        conn.execute("VACUUM ANALYZE lonnymq_message, lonnymq_channel")
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in conns}
    done = dict.fromkeys(conns, 0)
    names = list(conns)
    call = first
    while any(n < total for n in done.values()):
        for name in names[call % 3 :] + names[: call % 3]:
            if done[name] >= total:
                continue
            conn = conns[name]
            t0 = time.perf_counter()
            rows = core.dequeue(conn, QUEUE, 100)
            t1 = time.perf_counter()
            if not rows:
                raise RuntimeError(
                    f"{name}: drained {done[name]} of {total}, then nothing: a limit held it back"
                )
            core.ack(conn, rows)
            times[name][0].append(t1 - t0)
            times[name][1].append(time.perf_counter() - t1)
            done[name] += len(rows)
        call += 1
    med = statistics.median
    return {name: (med(deq), med(ack)) for name, (deq, ack) in times.items()}


def main(argv: list[str] | None = None) -> None:
    names = migrations()
    before = names[names.index(FIRST_MIGRATION) - 1]
    parser = argparse.ArgumentParser(prog="python -m bench.limits", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--base", default=before, choices=names[:-1], help="migration of the baseline SQL")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--drain", type=int, default=20_000, help="messages drained per setup and round")
    parser.add_argument("--costs", action="store_true", help="the all-limits setup's messages cost 1-3 tokens")
    args = parser.parse_args(argv)

    urls = dict(
        zip(SETUPS, (with_suffix(args.database_url, s) for s in ("base", "live", "limits")), strict=True)
    )
    core.log(f"building {urls['base']} at {args.base}, the other two at {names[-1]}")
    for name, url in urls.items():
        build(url, args.base if name == "base" else names[-1])
    figures: dict[str, dict[str, list[float]]] = {s: {"dequeue": [], "dequeue+ack": []} for s in SETUPS}
    ratios: dict[str, dict[str, list[float]]] = {s: {"dequeue": [], "dequeue+ack": []} for s in SETUPS}
    conns = {name: core.connect(url) for name, url in urls.items()}
    try:
        for number in range(args.rounds):
            got = one_round(conns, args.drain, number, args.costs)
            for setup, (deq, ack) in got.items():
                figures[setup]["dequeue"].append(deq)
                figures[setup]["dequeue+ack"].append(deq + ack)
                ratios[setup]["dequeue"].append(deq / got["base"][0])
                ratios[setup]["dequeue+ack"].append((deq + ack) / sum(got["base"]))
            core.log(f"round {number + 1}/{args.rounds} done")
    finally:
        for conn in conns.values():
            conn.close()

    med = statistics.median
    print(f"dequeue of 100 over 1,000 channels; base SQL at {args.base}, live at {names[-1]}; "
          f"medians of {args.rounds} rounds, {args.drain} messages each"
          + ("; all limits with costs 1-3" if args.costs else ""))  # fmt: skip
    print(f"machine: {core.machine_facts()}")
    print(f"{'setup':<22}{'dequeue (us)':>14}{'x base':>9}{'dequeue+ack (us)':>19}{'x base':>9}")
    for setup in SETUPS:
        f, r = figures[setup], ratios[setup]
        print(
            f"{setup:<22}{med(f['dequeue']) * 1e6:>14.0f}{med(r['dequeue']):>9.2f}"
            f"{med(f['dequeue+ack']) * 1e6:>19.0f}{med(r['dequeue+ack']):>9.2f}"
        )


if __name__ == "__main__":
    main()
