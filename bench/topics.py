"""Publishing to topics against enqueue_many: ``python -m bench.topics`` (about a minute).

For 1, 4 and 16 consumer groups (queues subscribed to the topic) and 1 and 100 events per
transaction, a producer publishes events over 50 keys (``publish`` for one event per
transaction, ``publish_many`` for 100), and, in the same round on emptied tables, writes the
same messages with ``enqueue_many`` (one call per group and transaction, the same channels):
what a producer would do without topics. Rounds alternate the two; the table shows medians
of the rounds: events/s and messages/s (= events x groups) of each, and the ratio of
publish's messages/s to enqueue_many's (the median of the rounds' ratios, with min-max).

The database is ``--database-url`` (or ``LONNYMQ_BENCH_DATABASE_URL``; default
postgres://postgres@127.0.0.1:5432/lq_bench_topics); it is dropped and recreated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from . import core

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lq_bench_topics"
GROUPS = (1, 4, 16)
BATCHES = (1, 100)
KEYS = 50


def django_setup(url: str) -> None:
    import django
    import environ
    from django.conf import settings

    settings.configure(
        DATABASES={"default": environ.Env.db_url_config(url)},
        INSTALLED_APPS=["django_lonnymq"],
        USE_TZ=True,
    )
    django.setup()


def queues(groups: int) -> list[str]:
    return [f"bench_group_{i:02d}" for i in range(groups)]


def topic(groups: int) -> str:
    return f"bench.topic.{groups}"


def subscribe_all() -> None:
    from django_lonnymq.models import Subscription

    for groups in GROUPS:
        for queue in queues(groups):
            Subscription.objects.create(topic=topic(groups), queue=queue)


def reset() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE lonnymq_message, lonnymq_dedup, lonnymq_channel, lonnymq_wake RESTART IDENTITY CASCADE"
        )


def publisher(groups: int, batch: int, events: int) -> Callable[[], None]:
    from django.db import transaction

    from django_lonnymq import Event, publish, publish_many

    name = topic(groups)

    def run() -> None:
        for start in range(0, events, batch):
            with transaction.atomic():
                if batch == 1:
                    publish(name, core.PAYLOAD, key=f"key-{start % KEYS}")
                else:
                    publish_many(
                        name, [Event(core.PAYLOAD, key=f"key-{n % KEYS}") for n in range(start, start + batch)]
                    )

    return run


def enqueuer(groups: int, batch: int, events: int) -> Callable[[], None]:
    from django.db import transaction

    from django_lonnymq import Item, enqueue_many

    names = queues(groups)

    def run() -> None:
        for start in range(0, events, batch):
            items = [Item(core.PAYLOAD, channel=f"key-{n % KEYS}") for n in range(start, start + batch)]
            with transaction.atomic():
                for queue in names:
                    enqueue_many(queue, items)

    return run


def measure(events_per_batch: dict[int, int], rounds: int) -> list[dict[str, float]]:
    from django.db import connection

    results = []
    for groups in GROUPS:
        for batch in BATCHES:
            events = events_per_batch[batch]
            timings: dict[str, list[float]] = {"publish": [], "enqueue_many": []}
            ratios = []
            for r in range(rounds):
                order = ["publish", "enqueue_many"] if r % 2 == 0 else ["enqueue_many", "publish"]
                this = {}
                for kind in order:
                    reset()
                    step = (publisher if kind == "publish" else enqueuer)(groups, batch, events)
                    t0 = time.perf_counter()
                    step()
                    this[kind] = time.perf_counter() - t0
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT count(*) FROM lonnymq_message")
                        written = cursor.fetchone()[0]
                    assert written == events * groups, f"{kind} wrote {written}, not {events * groups}"
                    timings[kind].append(this[kind])
                ratios.append(this["enqueue_many"] / this["publish"])
            seconds = {kind: statistics.median(values) for kind, values in timings.items()}
            results.append(
                {
                    "groups": groups,
                    "batch": batch,
                    "events": events,
                    "pub_events": events / seconds["publish"],
                    "pub_messages": events * groups / seconds["publish"],
                    "em_messages": events * groups / seconds["enqueue_many"],
                    "ratio": statistics.median(ratios),
                    "low": min(ratios),
                    "high": max(ratios),
                }
            )
            row = results[-1]
            core.log(
                f"groups={groups} batch={batch}: publish {row['pub_events']:,.0f} events/s "
                f"{row['pub_messages']:,.0f} msg/s; enqueue_many {row['em_messages']:,.0f} msg/s"
            )
    return results


def table(results: list[dict[str, float]], rounds: int) -> str:
    lines = [
        f"publish vs enqueue_many, events over {KEYS} keys, {rounds} rounds (medians; "
        "ratio = publish msg/s / enqueue_many msg/s, median of the rounds, min-max)",
        "",
        "| groups | events/txn | events | publish events/s | publish msg/s | enqueue_many msg/s | ratio            |",
        "|-------:|-----------:|-------:|-----------------:|--------------:|-------------------:|------------------|",
    ]
    for r in results:
        ratio = f"{r['ratio']:.2f} ({r['low']:.2f}-{r['high']:.2f})"
        lines.append(
            f"| {r['groups']:>6} | {r['batch']:>10} | {r['events']:>6,} | {r['pub_events']:>16,.0f} "
            f"| {r['pub_messages']:>13,.0f} | {r['em_messages']:>18,.0f} | {ratio:<16} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.topics", description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--single", type=int, default=300, help="events published one per transaction (default 300)")
    ap.add_argument("--batched", type=int, default=2000, help="events published 100 per transaction (default 2,000)")
    args = ap.parse_args(argv)
    if args.batched % 100:
        ap.error("--batched must be a multiple of 100")
    url = args.database_url or os.environ.get("LONNYMQ_BENCH_DATABASE_URL") or DEFAULT_URL
    core.log(f"recreating {url}")
    core.recreate_database(url)
    django_setup(url)
    subscribe_all()
    results = measure({1: args.single, 100: args.batched}, args.rounds)
    print(table(results, args.rounds))


if __name__ == "__main__":
    main()
