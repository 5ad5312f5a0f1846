"""Queues on several databases (``LONNYMQ_QUEUE_DATABASES``): every call that names a queue
follows the mapping, on a second real database of the test server (the ``other`` alias)."""

from __future__ import annotations

import io
import json
import warnings

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.db import connections, transaction
from django.db.migrations.recorder import MigrationRecorder

from django_lonnymq import Workflow, api, chain, enqueue, enqueue_many, publish, queue_database, testing
from django_lonnymq.checks import check_queue_databases, check_schema_installed
from django_lonnymq.exceptions import CrossDatabaseTransaction, CrossDatabaseWarning, InvalidArgument
from django_lonnymq.models import (
    Channel,
    Message,
    QueueConfig,
    Subscription,
    TaskResultRecord,
    Unrouted,
    WorkflowRecord,
    WorkflowStepRecord,
)
from django_lonnymq.registry import autodiscover
from django_lonnymq.routing import by_database, queue_databases
from django_lonnymq.topics import subscribe, sync_subscriptions, unsubscribe_declared
from django_lonnymq.worker import WorkerGroup
from django_lonnymq.workflows import requeue_failed_steps

BOTH = ["default", "other"]
pytestmark = pytest.mark.django_db(databases=BOTH)

# t_noop and t_sleep live on "other", every other queue on "default".
MAPPING = {"t_noop": "other", "t_sleep": "other", "tasks_other": "other"}


@pytest.fixture(autouse=True)
def mapped(settings):
    settings.LONNYMQ_QUEUE_DATABASES = MAPPING
    autodiscover()


def on(alias: str, queue: str) -> list[int]:
    return sorted(Message.objects.using(alias).filter(channel__queue=queue).values_list("id", flat=True))


# ---------------------------------------------------------------------------------------
# Routing
# ---------------------------------------------------------------------------------------


def test_a_queue_maps_to_its_alias_and_using_wins():
    assert queue_database("t_noop") == "other"
    assert queue_database("t_record") == "default"
    assert queue_database("t_noop", "default") == "default"
    assert queue_databases() == ["default", "other"]
    assert by_database(["t_record", "t_noop", "t_sleep", "t_record"]) == {
        "default": ["t_record"],
        "other": ["t_noop", "t_sleep"],
    }
    with pytest.raises(InvalidArgument, match="using"):
        queue_database("t_noop", "nowhere")


def test_enqueue_to_a_mapped_queue_lands_on_the_other_database():
    mapped_id = enqueue("t_noop", {"n": 1}, channel="acme")
    default_id = enqueue("t_record", {"n": 2})
    many = enqueue_many("t_noop", [{"n": 3}, {"n": 4}])
    assert on("other", "t_noop") == sorted([mapped_id, *many])
    assert on("default", "t_noop") == []
    assert on("default", "t_record") == [default_id]
    assert on("other", "t_record") == []
    # using= wins over the mapping.
    forced = enqueue("t_noop", {"n": 5}, using="default")
    assert on("default", "t_noop") == [forced]
    assert [m.id for m in testing.enqueued("t_noop")] == sorted([mapped_id, *many])


def test_transactional_enqueue_uses_the_queue_databases_transaction():
    # Rolled back on the queue's database: the message goes with it.
    with pytest.raises(RuntimeError), transaction.atomic(using="other"):
        enqueue("t_noop", {"n": 1})
        raise RuntimeError("request failed")
    assert on("other", "t_noop") == []
    # A transaction on default alone does not hold a message of a queue on other.
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        kept = enqueue("t_noop", {"n": 2})
        raise RuntimeError("request failed")
    assert on("other", "t_noop") == [kept]
    # Both committed together when the caller opens both.
    with transaction.atomic(using="default"), transaction.atomic(using="other"):
        both = enqueue("t_noop", {"n": 3})
        here = enqueue("t_record", {"n": 4})
    assert both in on("other", "t_noop") and on("default", "t_record") == [here]


def test_configure_pause_and_operations_follow_the_mapping():
    api.configure_channel("t_noop", "acme", max_concurrency=2)
    api.configure_queue("t_noop", max_concurrency=5)
    assert api.pause_queue("t_noop") is True
    channel = Channel.objects.using("other").get(queue="t_noop", name="acme")
    assert channel.max_concurrency == 2
    config = QueueConfig.objects.using("other").get(queue="t_noop")
    assert config.max_concurrency == 5 and config.paused
    assert not Channel.objects.using("default").filter(queue="t_noop").exists()
    assert not QueueConfig.objects.using("default").filter(queue="t_noop").exists()
    assert api.resume_queue("t_noop") is True
    # Calls that take ids name no queue: they run on using= (ids are per database).
    message_id = enqueue("t_noop", {"n": 1})
    assert api.cancel([message_id], using="other") == [message_id]
    assert on("other", "t_noop") == []


def test_lonnymq_queue_command_follows_the_mapping():
    out = io.StringIO()
    call_command("lonnymq_queue", "pause", "t_noop", "t_record", stdout=out)
    assert QueueConfig.objects.using("other").get(queue="t_noop").paused
    assert QueueConfig.objects.using("default").get(queue="t_record").paused
    status = io.StringIO()
    call_command("lonnymq_queue", "status", stdout=status)
    assert status.getvalue().splitlines() == ["t_noop: paused", "t_record: paused"]


# ---------------------------------------------------------------------------------------
# Topics
# ---------------------------------------------------------------------------------------


@pytest.fixture
def fanout():
    """invoices.paid has a group on each database: t_record (default) and t_noop (other)."""
    subscribe("invoices.paid", queue="t_record")
    subscribe("invoices.paid", queue="t_noop")
    yield
    unsubscribe_declared("invoices.paid", "t_record")
    unsubscribe_declared("invoices.paid", "t_noop")


def test_subscriptions_live_with_their_queues_and_publish_reaches_both(fanout):
    assert sync_subscriptions() >= 2  # and whatever else the test apps declare
    assert sync_subscriptions() == 0
    paid = Subscription.objects.filter(topic="invoices.paid")
    assert list(paid.using("default").values_list("queue", flat=True)) == ["t_record"]
    assert list(paid.using("other").values_list("queue", flat=True)) == ["t_noop"]
    ids = publish("invoices.paid", {"invoice": 7}, key="acme")
    # Queue-name order across the databases: t_noop, then t_record.
    assert ids == [on("other", "t_noop")[0], on("default", "t_record")[0]]
    # A topic that no database subscribes to is counted unrouted once, on LONNYMQ_DATABASE.
    assert publish("nobody.listens", {"x": 1}) == []
    assert Unrouted.objects.using("default").get(topic="nobody.listens").events == 1
    assert not Unrouted.objects.using("other").filter(topic="nobody.listens").exists()
    assert not Unrouted.objects.using("default").filter(topic="invoices.paid").exists()


def test_publish_with_using_runs_on_that_database_alone(fanout):
    sync_subscriptions()
    ids = publish("invoices.paid", {"invoice": 8}, using="other")
    assert ids == on("other", "t_noop")
    assert on("default", "t_record") == []


# ---------------------------------------------------------------------------------------
# The Django Tasks backend
# ---------------------------------------------------------------------------------------


@pytest.fixture
def fresh_backends():
    from asgiref.local import Local

    from django_lonnymq.tasks import task_backends

    task_backends._connections = Local()
    yield task_backends
    task_backends._connections = Local()


def test_a_task_queue_follows_the_mapping(fresh_backends):
    from tests.testapp import tasks

    result = tasks.note.enqueue("hello", tenant_id="acme")  # queue_name="tasks_other"
    assert len(on("other", "tasks_other")) == 1
    assert TaskResultRecord.objects.using("other").filter(id=result.id).exists()
    assert not TaskResultRecord.objects.using("default").filter(id=result.id).exists()
    assert fresh_backends["default"].get_result(result.id).id == result.id
    plain = tasks.add.enqueue(1, 2)  # queue "default" stays on default
    assert TaskResultRecord.objects.using("default").filter(id=plain.id).exists()
    assert fresh_backends["default"].get_result(plain.id).id == plain.id


def test_a_workflow_of_a_mapped_task_queue_and_its_result_rows_live_on_its_database(fresh_backends):
    from tests.testapp import tasks

    flow = Workflow("task steps")
    first = flow.step(tasks.note, args=["hello"])  # queue_name="tasks_other"
    flow.step("t_noop", {}, after=[first])
    with pytest.raises(InvalidArgument, match="must live on the workflow's database 'other'"):
        flow.step(tasks.add, args=[1, 2])  # queue "default" stays on default
    workflow_id = flow.start()
    assert flow.using == "other"
    step_id = api.workflow(workflow_id, using="other").step("note").id
    assert TaskResultRecord.objects.using("other").filter(message_id=step_id).exists()
    assert not TaskResultRecord.objects.using("default").exists()
    assert workflow_rows("default") == (0, 0, 0)


# ---------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"reports": "nowhere"}, "'nowhere', which is not a database alias"),
        ({"reports": 3}, "maps to 3"),
        ({"": "other"}, "must be 1 to 100 characters"),
        (["reports"], "must be a dict of queue name to database alias, got list"),
    ],
)
def test_e250_a_bad_mapping_is_reported(settings, value, says):
    settings.LONNYMQ_QUEUE_DATABASES = value
    errors = check_queue_databases()
    assert [e.id for e in errors] == ["lonnymq.E250"]
    assert says in errors[0].msg
    assert "lonnymq.E250" in [e.id for e in run_checks()]


def test_e250_a_good_mapping_passes():
    assert check_queue_databases() == []


def test_w210_a_mapped_database_without_the_tables_is_reported():
    assert check_schema_installed(databases=BOTH) == []
    # As if the last migration never ran on "other" (rolled back with the test).
    MigrationRecorder(connections["other"]).migration_qs.filter(app="django_lonnymq").order_by("-id")[
        :1
    ].get().delete()
    warnings = check_schema_installed(databases=BOTH)
    assert [w.id for w in warnings] == ["lonnymq.W210"]
    assert "'other'" in warnings[0].msg
    assert warnings[0].hint == "Run `python manage.py migrate --database other`."


# ---------------------------------------------------------------------------------------
# Stats, health, /metrics: every database that holds queues
# ---------------------------------------------------------------------------------------


def test_stats_health_and_metrics_cover_every_database():
    enqueue("t_noop", {"n": 1})
    enqueue("t_record", {"n": 2})
    out = io.StringIO()
    call_command("lonnymq_stats", "--json", stdout=out)
    rows = {row["queue"]: row for row in json.loads(out.getvalue())["queues"]}
    assert rows["t_noop"]["database"] == "other" and rows["t_noop"]["ready"] == 1
    assert rows["t_record"]["database"] == "default" and rows["t_record"]["ready"] == 1
    one = io.StringIO()
    call_command("lonnymq_stats", "--json", "--database", "other", stdout=one)
    assert [row["queue"] for row in json.loads(one.getvalue())["queues"]] == ["t_noop"]

    health = io.StringIO()
    with pytest.raises(Exception, match="no live worker"):
        call_command("lonnymq_health", "--json", stdout=health)
    report = json.loads(health.getvalue())
    assert set(report["databases"]) == {"default", "other"}
    assert "t_noop" in report["databases"]["other"]["queues"]
    assert any(p.startswith("[other] ") and "t_noop" in p for p in report["problems"])

    from django_lonnymq.prometheus import QueueCollector

    ready = {
        sample.labels["queue"]: sample.value
        for family in QueueCollector().collect()
        if family.name == "lonnymq_ready_messages"
        for sample in family.samples
    }
    assert {queue: ready[queue] for queue in ("t_noop", "t_record")} == {"t_noop": 1, "t_record": 1}


# ---------------------------------------------------------------------------------------
# One worker, queues on both databases
# ---------------------------------------------------------------------------------------


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_worker_group_drains_queues_on_both_databases(recording):
    enqueue_many("t_record", [{"n": i} for i in range(5)], channel="a")
    enqueue_many("t_sleep", [{"n": i, "seconds": 0} for i in range(5)], channel="b")
    group = WorkerGroup(by_database(["t_record", "t_sleep"]), concurrency=2, burst=True, housekeeping=False)
    assert sorted(worker.using for worker in group.workers) == BOTH
    stats = group.run()
    assert stats.acked == 10 and group.exit_code == 0
    assert on("default", "t_record") == [] and on("other", "t_sleep") == []
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT queue, count(*) FROM testapp_delivery WHERE event = 'done' GROUP BY queue ORDER BY 1"
        )
        done = cursor.fetchall()
    assert done == [("t_record", 5), ("t_sleep", 5)]


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_testing_drain_follows_the_mapping(recording):
    enqueue("t_sleep", {"seconds": 0})
    enqueue("t_record", {"n": 1})
    assert testing.drain().acked == 2
    assert on("other", "t_sleep") == [] and on("default", "t_record") == []


def test_a_worker_runs_on_its_queues_database():
    from django_lonnymq.worker import Worker

    assert Worker(["t_noop"]).using == "other"
    assert Worker(["t_record"]).using == "default"
    assert Worker(["t_noop", "t_record"], using="default").using == "default"
    with pytest.raises(InvalidArgument, match="several databases"):
        Worker(["t_noop", "t_record"])


def test_a_worker_group_refuses_max_messages_and_one_database():
    with pytest.raises(InvalidArgument, match="max_messages"):
        WorkerGroup(by_database(["t_record", "t_noop"]), max_messages=3)
    with pytest.raises(InvalidArgument, match="two databases or more"):
        WorkerGroup(by_database(["t_record"]))


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_workers_ticker_syncs_only_the_schedules_of_its_database():
    import psycopg

    from django_lonnymq import periodic, schedules
    from django_lonnymq.management.commands.lonnymq_spark_export import dsn_from_settings
    from django_lonnymq.models import Schedule

    def target(message):  # a stand-in handler
        pass

    periodic(every=60, queue="t_record", name="md_on_default")(target)
    periodic(every=60, queue="t_sleep", name="md_on_other")(target)
    try:
        for alias, served in (("other", ["t_sleep"]), ("default", ["t_record"])):
            with psycopg.connect(
                dsn_from_settings(connections[alias].settings_dict), autocommit=True
            ) as conn:
                schedules.Ticker(served, interval=60, using=alias).run(conn)
        mine = Schedule.objects.filter(name__startswith="md_on_")
        assert list(mine.using("other").values_list("name", flat=True)) == ["md_on_other"]
        assert list(mine.using("default").values_list("name", flat=True)) == ["md_on_default"]
    finally:
        schedules.forget("md_on_default")
        schedules.forget("md_on_other")


# ---------------------------------------------------------------------------------------
# Workflows: a workflow lives on its queues' database
# ---------------------------------------------------------------------------------------


def workflow_rows(alias: str) -> tuple[int, int, int]:
    return (
        WorkflowRecord.objects.using(alias).count(),
        WorkflowStepRecord.objects.using(alias).count(),
        Message.objects.using(alias).count(),
    )


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_a_workflow_of_mapped_queues_starts_runs_and_releases_on_their_database(recording: None):
    # recording: t_sleep writes its deliveries to the default database's testapp_delivery,
    # which an earlier test of the same process may or may not have left (xdist's order).
    flow = Workflow("elsewhere", channel="acme")
    first = flow.step("t_noop", {"n": 1})
    flow.step("t_sleep", {"seconds": 0}, after=[first])
    flow.on_failure("t_noop", {"failed": True})
    assert flow.using == "other"
    workflow_id = flow.start()
    assert flow.using == "other"
    assert workflow_rows("default") == (0, 0, 0)
    assert workflow_rows("other") == (1, 2, 1)
    # The worker of t_noop runs on "other"; its ack releases t_sleep there.
    assert testing.drain("t_noop").acked == 1
    assert on("other", "t_sleep") == [api.workflow(workflow_id, using="other").step("t_sleep").id]
    assert testing.drain("t_sleep").acked == 1
    assert api.workflow(workflow_id, using="other").state == "succeeded"
    assert workflow_rows("default") == (0, 0, 0)


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_requeue_of_a_mapped_workflow_runs_on_its_database_and_names_it_when_missing():
    flow = Workflow("elsewhere")
    flow.step("t_noop", {})
    workflow_id = flow.start()
    step_id = api.workflow(workflow_id, using=flow.using).steps[0].id
    api.cancel([step_id], using="other")  # a waiting step cancelled: dead, the workflow failed
    assert api.workflow(workflow_id, using="other").state == "failed"
    with pytest.raises(InvalidArgument, match="on database 'default'.*per database") as raised:
        requeue_failed_steps(workflow_id)
    assert raised.value.field == "workflow_id"
    assert requeue_failed_steps(workflow_id, using="other") == [step_id]
    assert testing.drain("t_noop").acked == 1
    assert api.workflow(workflow_id, using="other").state == "succeeded"


def test_a_workflow_whose_queues_span_databases_is_refused_before_anything_is_written():
    flow = Workflow("mixed")
    flow.step("t_record", {})
    with pytest.raises(
        InvalidArgument, match="must live on the workflow's database 'default'.*'other'"
    ) as raised:
        flow.step("t_noop", {})
    assert raised.value.field == "queue" and raised.value.value == "t_noop"
    with pytest.raises(InvalidArgument, match="must live on the workflow's database 'default'") as raised:
        flow.on_failure("t_sleep", {})
    assert raised.value.field == "on_failure queue"
    assert [s.queue for s in flow.steps] == ["t_record"]
    # The on_failure queue counts as the first step would.
    other_first = Workflow("mixed")
    other_first.on_failure("t_noop", {})
    with pytest.raises(InvalidArgument, match="database 'other'"):
        other_first.step("t_record", {})
    # chain() takes back the steps it added when one is refused.
    chained = Workflow("chained")
    with pytest.raises(InvalidArgument, match="must live on the workflow's database"):
        chain(chained, ("t_noop", {}), ("t_sleep", {}), ("t_record", {}))
    assert chained.steps == []
    assert workflow_rows("default") == (0, 0, 0) and workflow_rows("other") == (0, 0, 0)


def test_using_pins_a_workflow_to_a_database_whatever_its_queues():
    flow = Workflow("pinned", using="default")
    flow.step("t_noop", {})
    flow.step("t_record", {})
    flow.start()
    assert workflow_rows("default") == (1, 2, 2) and workflow_rows("other") == (0, 0, 0)


# ---------------------------------------------------------------------------------------
# A write to a queue on another database than the open transaction's
# ---------------------------------------------------------------------------------------


def pending_on(alias: str) -> int:
    return Message.objects.using(alias).count()


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_an_enqueue_that_would_escape_the_open_transaction_warns_by_default():
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        with pytest.warns(
            CrossDatabaseWarning, match="database 'other', which is not in a transaction.*'default'"
        ):
            kept = enqueue("t_noop", {"n": 1})
        with pytest.warns(CrossDatabaseWarning, match="enqueue_many"):
            enqueue_many("t_noop", [{"n": 2}])
        flow = Workflow("elsewhere")
        flow.step("t_noop", {})
        with pytest.warns(CrossDatabaseWarning, match="Workflow.start"):
            flow.start()
        raise RuntimeError("request failed")
    assert kept in on("other", "t_noop") and pending_on("other") == 3  # committed at once, as warned


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_an_enqueue_that_would_escape_the_open_transaction_raises_when_asked(settings):
    settings.LONNYMQ_CROSS_DATABASE_ENQUEUE = "raise"
    with transaction.atomic(using="default"):
        with pytest.raises(CrossDatabaseTransaction, match="nothing was written"):
            enqueue("t_noop", {"n": 1})
        with pytest.raises(CrossDatabaseTransaction):
            enqueue_many("t_noop", [{"n": 2}])
        flow = Workflow("elsewhere")
        flow.step("t_noop", {})
        with pytest.raises(CrossDatabaseTransaction):
            flow.start()
        assert flow.id is None
        here = enqueue("t_record", {"n": 3})  # the open transaction's own database: fine
    assert pending_on("other") == 0 and on("default", "t_record") == [here]
    assert WorkflowRecord.objects.using("other").count() == 0


@pytest.mark.django_db(databases=BOTH, transaction=True)
def test_an_enqueue_in_a_transaction_of_its_own_database_or_outside_any_says_nothing(settings):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enqueue("t_noop", {"n": 1})  # no transaction anywhere
        with transaction.atomic(using="default"), transaction.atomic(using="other"):
            enqueue("t_noop", {"n": 2})  # both open: it commits with "other"'s
        with transaction.atomic(using="other"):
            enqueue("t_noop", {"n": 3})
        settings.LONNYMQ_CROSS_DATABASE_ENQUEUE = "allow"
        with transaction.atomic(using="default"):
            enqueue("t_noop", {"n": 4})
    assert pending_on("other") == 4
