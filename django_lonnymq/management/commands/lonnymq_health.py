"""``manage.py lonnymq_health``: is the queue healthy? Exits 1 when something is wrong.

Reports, for each database that holds queues (``LONNYMQ_DATABASE`` and every alias of
``LONNYMQ_QUEUE_DATABASES``; ``--database`` for one), a section each:

* dead tuples on the queue's tables (``pg_stat_user_tables.n_dead_tup``): the hot tables
  are rewritten on every release and ack; dead tuples that pile up make dequeue slower;
* what holds this database's xmin horizon back (sessions with a snapshot or a transaction id,
  ``pg_stat_activity.backend_xmin`` / ``backend_xid``; WAL senders; prepared transactions;
  replication slots with an xmin), each named (pid, user, application, state, statement):
  while one lasts, no dead tuple newer than its horizon can be removed, and every dequeue
  reads more of them. One older than ``--max-xact-age`` (``LONNYMQ_HORIZON_ALARM``, 5
  minutes) fails, and so does an inactive slot that holds an xmin;
* leases that expired more than ``--lease-grace`` ago and were not recovered (no worker is
  reaping: all workers are down or stuck);
* the scheduler's own invariant check (``django_lonnymq.api.check()``): in-flight counters
  that disagree with the leases, ready messages that no dequeue will look at;
* each queue's ready messages: a queue that holds some and has no live worker serving it
  fails, and so does one whose most overdue ready message has been due longer than
  ``LONNYMQ_HEALTH_MAX_READY_AGE`` (5 minutes; :mod:`django_lonnymq.alarms`); a paused
  channel's messages are paused, not ready, and never count. Ready and paused messages are
  counted up to ``alarms.HEALTH_COUNT_CAP`` (10,000; "more than 10,000" beyond), so the
  command's work does not grow with the backlog; ``lonnymq_stats`` counts them all;
* a dequeue probe: one real dequeue of each queue that has work, in a transaction rolled
  back at once (nothing stays leased), so a queue whose dequeue fails is reported even
  while its workers keep running and backing off.

Thresholds are flags; ``--json`` prints the report as one JSON object (for monitoring).
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, transaction

from django_lonnymq import alarms, api, statements
from django_lonnymq.bounds import MAX_INTERVAL
from django_lonnymq.exceptions import LonnyMQError
from django_lonnymq.management.options import check_database
from django_lonnymq.routing import databases_of
from django_lonnymq.worker.lifecycle import DjangoExecutor, lease

TABLES = ("lonnymq_channel", "lonnymq_message", "lonnymq_wake", "lonnymq_dedup", "lonnymq_dead_message")


def _seconds(text: str) -> float:
    """A number of seconds: finite, 0 to 366 days."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_INTERVAL.total_seconds():
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds from 0 to 366 days")
    return value


class Command(BaseCommand):
    help = (
        "Report the queue's health: dead tuples, the oldest open transaction, expired leases, queues "
        "with ready messages and no live worker or too old a ready message, and the scheduler check. "
        "Exits with status 1 when a threshold is crossed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default=None, help="Database alias (default LONNYMQ_DATABASE).")
        parser.add_argument(
            "--max-dead-tuples",
            type=int,
            default=100_000,
            help="Most dead tuples allowed on any queue table (default 100000).",
        )
        parser.add_argument(
            "--max-xact-age",
            type=_seconds,
            default=None,
            help="Longest a session, a prepared transaction or a replication slot may hold the xmin "
            "horizon of this database back, in seconds (default LONNYMQ_HORIZON_ALARM, 300).",
        )
        parser.add_argument(
            "--lease-grace",
            type=_seconds,
            default=60.0,
            help="Expired leases younger than this many seconds are not counted: workers "
            "reap them on their own (default 60).",
        )
        parser.add_argument(
            "--max-expired-leases",
            type=int,
            default=0,
            help="Most leases expired longer than --lease-grace ago (default 0).",
        )
        parser.add_argument(
            "--check-grace",
            type=_seconds,
            default=5.0,
            help="Grace the scheduler check gives a due message, in seconds (default 5).",
        )
        parser.add_argument(
            "--max-ready-age",
            type=_seconds,
            default=None,
            help="Longest any ready message may have been due, in seconds (default "
            "LONNYMQ_HEALTH_MAX_READY_AGE, 300). Messages of paused channels are not ready and never count.",
        )
        parser.add_argument(
            "--no-ready-age",
            action="store_true",
            help="Report the oldest ready message's age without judging it.",
        )
        parser.add_argument(
            "--require-workers",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Fail when a queue holds ready messages and no live worker serves it (default "
            "LONNYMQ_HEALTH_REQUIRE_WORKERS, on).",
        )
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        check_database(options["database"])
        # Every database that holds queues (LONNYMQ_QUEUE_DATABASES), or --database alone.
        aliases = databases_of(options["database"])
        if len(aliases) == 1:
            report = self._report(aliases[0], options)
            problems = report["problems"]
            if options["json"]:
                self.stdout.write(json.dumps(report, default=str))
            else:
                self._print(report, options)
        else:
            reports = {alias: self._report(alias, options) for alias in aliases}
            problems = [
                f"[{alias}] {problem}" for alias, found in reports.items() for problem in found["problems"]
            ]
            if options["json"]:
                combined = {"healthy": not problems, "problems": problems, "databases": reports}
                self.stdout.write(json.dumps(combined, default=str))
            else:
                for alias, found in reports.items():
                    self.stdout.write(f"== database {alias} ==")
                    self._print(found, options)
        if problems:
            raise CommandError(f"{len(problems)} problem(s): " + "; ".join(problems))

    def _report(self, alias: str, options: dict[str, Any]) -> dict[str, Any]:
        """The report of one database (its ``problems`` included)."""
        problems: list[str] = []
        report: dict[str, Any] = {}

        tables = {
            name: {"live": live, "dead": dead, "vacuumed_ago_s": None if ago is None else round(ago, 1)}
            for name, live, dead, ago in statements.table_health(tables=list(TABLES), on=alias)
        }
        report["tables"] = tables
        for name, stats in tables.items():
            if stats["dead"] > options["max_dead_tuples"]:
                problems.append(
                    f"{name} has {stats['dead']} dead tuples (more than {options['max_dead_tuples']}); "
                    "vacuum cannot keep up or an old transaction holds it back"
                )

        # What holds the xmin horizon back: VACUUM removes no newer dead row meanwhile.
        holders = alarms.horizon_holders(alias)
        report["horizon"] = [holder.as_dict() for holder in holders]
        dated = sorted((h for h in holders if h.age_seconds is not None), key=lambda h: -(h.age_seconds or 0))
        oldest = None
        if dated:
            first = dated[0]
            oldest = {"pid": first.pid, "who": first.application_name or first.user or first.name or "?",
                      "state": first.state, "age_s": round(first.age_seconds or 0, 1), "query": first.query}  # fmt: skip
        report["oldest_transaction"] = oldest
        limit = options["max_xact_age"]
        if limit is None:
            limit = alarms.horizon_alarm()
        held = alarms.horizon_alarms(holders, max_age=limit)
        report["horizon_alarms"] = [alarm.__dict__ for alarm in held]
        problems.extend(alarm.text for alarm in held)

        grace_ms = int(options["lease_grace"] * 1000)
        stale, expired, worst_ms = statements.expired_leases(grace_ms=grace_ms, on=alias)[0]
        report["expired_leases"] = {
            "older_than_grace": stale,
            "all": expired,
            "oldest_s": worst_ms / 1000,
        }
        if stale > options["max_expired_leases"]:
            problems.append(
                f"{stale} lease(s) expired more than {options['lease_grace']:g}s ago and were not "
                "recovered: are any workers running?"
            )

        # Counted up to alarms.HEALTH_COUNT_CAP: the work does not grow with the backlog.
        samples = alarms.health_figures(alias)
        live = alarms.live_workers(alias)
        paused = alarms.paused_queues(alias)  # a paused queue's backlog rings no alarm
        report["queues"] = {
            sample.queue: {
                "oldest_ready_s": sample.oldest_ready_seconds,
                "ready": sample.ready,
                "paused": sample.paused,
                "counted_up_to": alarms.HEALTH_COUNT_CAP,
                "queue_paused": sample.queue in paused,
                "live_workers": live.get(sample.queue, 0),
            }
            for sample in samples
        }
        limit = options["max_ready_age"]
        if limit is None and not options["no_ready_age"]:
            limit = alarms.max_ready_age()
        required = options["require_workers"]
        if required is None:
            required = alarms.require_workers()
        found_alarms = alarms.alarms(samples, live, max_age=limit, workers_required=required, paused=paused)
        report["alarms"] = [alarm.__dict__ for alarm in found_alarms]
        problems.extend(alarm.text for alarm in found_alarms)

        report["dequeue_probe"] = self._probe_dequeues(alias)
        for queue, error in report["dequeue_probe"].items():
            if error is not None:
                problems.append(f"dequeue of queue {queue} fails: {error}")

        checked = api.check(grace=timedelta(seconds=options["check_grace"]), using=alias)
        report["check"] = [p.__dict__ for p in checked]
        for p in checked:
            if p.channel is not None:
                where = f"{p.queue}/{p.channel}"
            else:  # a queue-wide problem, or messages whose channel row is missing
                where = p.queue if p.queue is not None else f"channel id {p.channel_id}"
            problems.append(f"check: {where} {p.problem}: {p.detail}")
        report["healthy"] = not problems
        report["problems"] = problems
        return report

    def _probe_dequeues(self, alias: str) -> dict[str, str | None]:
        """Each queue with work: None when one dequeue of it succeeds, else the error.

        The probe leases at most one message and rolls back at once: nothing stays leased,
        and no worker loses anything (it skips what the probe holds for that instant).
        """
        queues = [row[0] for row in statements.queues_with_ready_work(on=alias)]
        results: dict[str, str | None] = {}
        for queue in queues:
            try:
                with transaction.atomic(using=alias):
                    lease(
                        DjangoExecutor(alias), queue, 1, worker="lonnymq_health", lease_ms=1000, using=alias
                    )
                    transaction.set_rollback(True, using=alias)
                results[queue] = None
            except (DatabaseError, LonnyMQError) as exc:
                text = str(exc).strip()
                results[queue] = text.splitlines()[0] if text else type(exc).__name__
        return results

    def _print(self, report: dict[str, Any], options: dict[str, Any]) -> None:
        out = self.stdout.write
        for name, stats in report["tables"].items():
            vacuumed = "never" if stats["vacuumed_ago_s"] is None else f"{stats['vacuumed_ago_s']:g}s ago"
            out(f"{name}: {stats['live']} live, {stats['dead']} dead tuples (vacuumed {vacuumed})")
        oldest = report["oldest_transaction"]
        if oldest is None:
            out("oldest open transaction: none")
        else:
            out(
                f"oldest open transaction: {oldest['age_s']:g}s, pid {oldest['pid']} ({oldest['who']}, "
                f"{oldest['state']})"
            )
        for holder in report["horizon"]:
            age = "age unknown" if holder["age_seconds"] is None else f"{holder['age_seconds']:.1f}s"
            out(f"horizon held by {holder['description']}: {age}, {holder['xid_age']} transactions back")
        leases = report["expired_leases"]
        out(
            f"expired leases: {leases['all']} ({leases['older_than_grace']} older than "
            f"{options['lease_grace']:g}s)"
        )
        for queue, figures in report["queues"].items():
            age = figures["oldest_ready_s"]
            cap = figures["counted_up_to"]
            ready, held = (
                f"more than {cap:,}" if n > cap else f"{n}" for n in (figures["ready"], figures["paused"])
            )
            out(
                f"queue {queue}: {ready} ready, oldest due for "
                f"{'-' if age is None else f'{age:g}s'}; {held} paused; "
                f"{figures['live_workers']} live worker(s)"
            )
        failing = [q for q, error in report["dequeue_probe"].items() if error is not None]
        out(f"dequeue probe: {len(report['dequeue_probe'])} queue(s) with work, {len(failing)} failing")
        out(f"scheduler check: {len(report['check'])} problem(s)")
        if report["healthy"]:
            out(self.style.SUCCESS("healthy"))
        else:
            for problem in report["problems"]:
                out(self.style.ERROR(f"PROBLEM: {problem}"))
