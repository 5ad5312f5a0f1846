"""The SQL functions bound every value a caller can set, whoever calls them (not only the API).

Each case was accepted before migration 0006 and then broke something later: a release
interval that overflowed every later dequeue of its queue, a run time that overflowed the
stats, a negative dedup window that pruned every dedup key, 2-D arrays flattened into a
batch, a backoff that overflowed bigint, a configure that overwrote a concurrent change, a
batch enqueue that returned an id it never inserted.
"""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError, connection, transaction

from django_lonnymq import api, enqueue, enqueue_many
from django_lonnymq.api import Item
from django_lonnymq.exceptions import InvalidArgument, sql_errors
from tests.harness import helpers

pytestmark = pytest.mark.django_db(transaction=True)


def call(statement: str, params: list | None = None):
    with sql_errors(), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall()


def test_a_release_interval_that_would_overflow_a_dequeue_is_refused_and_the_queue_keeps_serving():
    enqueue("bounds", {"n": 1}, channel="innocent")
    with pytest.raises(InvalidArgument) as caught:
        call("SELECT lonnymq_configure_channel_v1('bounds', 'poison', NULL, 9223371000000000::bigint, false)")
    assert caught.value.field == "release_interval_ms" and "31622400000" in str(caught.value)
    with pytest.raises(InvalidArgument):
        api.configure_channel("bounds", "poison", release_interval=9_223_371_000_000)
    assert helpers.channel_row("bounds", "poison") is None  # nothing written
    # The largest accepted interval cannot overflow: the queue still serves every channel.
    api.configure_channel("bounds", "slow", release_interval=366 * 86400)
    enqueue("bounds", {"n": 2}, channel="slow")
    leased = helpers.dequeue("bounds", 10)
    assert sorted(r["channel"] for r in leased) == ["innocent", "slow"]
    enqueue("bounds", {"n": 3}, channel="slow")
    assert helpers.dequeue("bounds", 10) == []  # rate-limited for a year, not an error


@pytest.mark.parametrize(
    ("statement", "field"),
    [
        ("SELECT lonnymq_enqueue_v1('bounds', 'c', '{}'::jsonb, p_run_at_ms => -9223372036854775807)", "run_at"),
        ("SELECT lonnymq_enqueue_v1('bounds', 'c', '{}'::jsonb, p_run_at_ms => 9223372036854775807)", "run_at"),
        ("SELECT lonnymq_enqueue_v1('bounds', 'c', '{}'::jsonb, p_delay_ms => 3155760000001)", "delay"),
        ("SELECT lonnymq_enqueue_v1('bounds', 'c', '{}'::jsonb, p_priority => 1, p_priority_step_ms => -5)", "priority_step"),
        ("SELECT lonnymq_enqueue_v1('bounds', '   ', '{}'::jsonb)", "channel"),
        ("SELECT lonnymq_enqueue_v1(' ', 'c', '{}'::jsonb)", "queue"),
        ("SELECT lonnymq_reap_v1(10, -100000000)", "dedup_window"),
        ("SELECT lonnymq_reap_v1(0)", "limit"),
        ("SELECT * FROM lonnymq_dequeue_v1('bounds', 1, 9223372036854775807)", "lease"),
        ("SELECT lonnymq_extend_v1(ARRAY[1]::bigint[], ARRAY[gen_random_uuid()], 86400001)", "lease"),
        ("SELECT * FROM lonnymq_check_v1(9223372036854775807)", "grace"),
        ("SELECT * FROM lonnymq_check_v2(9223372036854775807)", "grace"),
        ("SELECT * FROM lonnymq_record_samples_v1(-1)", "keep"),
        ("SELECT lonnymq_enqueue_many_v1('bounds', ARRAY[['a','b'],['c','d']]::text[],"
         " ARRAY[['{}','{}'],['{}','{}']]::jsonb[])", "channels"),
        ("SELECT lonnymq_cancel_v1(ARRAY[[1,2],[3,4]]::bigint[])", "ids"),
        ("SELECT lonnymq_ack_v1(ARRAY[[1],[2]]::bigint[], ARRAY[[gen_random_uuid()],[gen_random_uuid()]])", "ids"),
        ("SELECT lonnymq_enqueue_many_v1('bounds', ARRAY['a'], ARRAY['{}']::jsonb[], p_delay_ms => ARRAY[-1]::bigint[])",
         "delay"),
        ("SELECT lonnymq_enqueue_many_v1('bounds', ARRAY['a'], ARRAY['{}']::jsonb[],"
         " p_run_at_ms => ARRAY[-9223372036854775807]::bigint[])", "run_at"),
        ("SELECT lonnymq_enqueue_many_v1('bounds', ARRAY[' '], ARRAY['{}']::jsonb[])", "items[0].channel"),
        ("SELECT lonnymq_fail_v1(1, gen_random_uuid(), p_retry_delay_ms => 9223372036854775807)", "retry_delay"),
        ("SELECT lonnymq_configure_channel_v2('bounds', 'c', p_release_interval_ms => -1)", "release_interval_ms"),
    ],
)  # fmt: skip
def test_direct_sql_calls_get_lq001_naming_the_field_and_write_nothing(statement, field):
    before = helpers.counts()
    dedup_before = helpers.scalar("SELECT count(*) FROM lonnymq_dedup")
    with pytest.raises(InvalidArgument) as caught:
        call(statement)
    assert caught.value.field == field, caught.value
    assert helpers.counts() == before
    assert helpers.scalar("SELECT count(*) FROM lonnymq_dedup") == dedup_before


def test_a_negative_dedup_window_no_longer_prunes_every_key():
    enqueue("bounds", {"n": 1}, channel="c", dedup_key="keep-me")
    with pytest.raises(InvalidArgument):
        call("SELECT lonnymq_reap_v1(10, -100000000)")
    assert helpers.scalar("SELECT count(*) FROM lonnymq_dedup WHERE dedup_key = 'keep-me'") == 1


def test_the_backoff_of_a_message_with_many_attempts_does_not_overflow():
    message_id = enqueue("bounds", {"n": 1}, channel="c", max_attempts=1000)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE lonnymq_message SET attempts = 500 WHERE id = %s", [message_id])
    (leased,) = helpers.dequeue("bounds")
    # base 366 days * 2^40 is far beyond bigint; the delay is capped at the maximum instead.
    outcome = helpers.fail(leased, "boom", backoff_base_ms=31_622_400_000, backoff_max_ms=31_622_400_000)
    assert outcome == "retry"
    row = helpers.message_row(message_id)
    assert 0 < row["dequeue_at"] - helpers.db_now_ms() <= 31_622_400_000


def test_configure_changes_only_the_limits_it_is_given_under_concurrency(connect):
    api.configure_channel("bounds", "c", max_concurrency=1, release_interval=0.0, paused=False)
    holder = connect(autocommit=False)
    # Another session changes the cap and holds the row until it commits.
    holder.execute(
        "SELECT lonnymq_configure_channel_v2('bounds'::text, 'c'::text, 7, false, NULL::bigint, NULL::boolean)"
    )
    done = threading.Event()
    errors: list[BaseException] = []

    def pause() -> None:
        try:
            api.configure_channel("bounds", "c", paused=True)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=pause)
    thread.start()
    assert not done.wait(0.5)  # waits for the holder's row lock
    holder.commit()
    assert done.wait(30) and not errors, errors
    thread.join()
    row = helpers.channel_row("bounds", "c")
    assert (row["max_concurrency"], row["paused"]) == (7, True)  # neither change lost


def test_enqueue_many_refuses_to_return_an_id_it_never_inserted():
    first = enqueue("bounds", {"n": 1}, channel="c", dedup_key="vanish")
    # A dedup row that vanishes between the batch's insert and its lookup (pruned or
    # cancelled by another session at that moment): simulated by a trigger that deletes it
    # right after the batch's insert statement.
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION pg_temp.vanish() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN DELETE FROM lonnymq_dedup WHERE dedup_key = 'vanish'; RETURN NULL; END $$;"
            " CREATE TRIGGER vanish AFTER INSERT ON lonnymq_message"
            " FOR EACH STATEMENT EXECUTE FUNCTION pg_temp.vanish()"
        )
    try:
        with pytest.raises(DatabaseError) as caught:
            enqueue_many(
                "bounds", [Item({"n": 2}, channel="c", dedup_key="vanish"), Item({"n": 3}, channel="c")]
            )
        assert caught.value.__cause__.sqlstate == "40001"
        assert "retry the transaction" in str(caught.value)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER vanish ON lonnymq_message")
    assert [m["id"] for m in helpers.messages_of("bounds")] == [first]
