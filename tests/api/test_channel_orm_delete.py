"""Deleting channels through the ORM (``Channel.delete()``, a queryset's ``delete()``) goes
through lonnymq_delete_channel_v1, as ``api.delete_channel`` and the admin do: all or none,
never while a producer holds the channel, with its wake-up marks, and a typed error that says
why a channel stayed."""

from __future__ import annotations

import pytest
from django.db import connection

from django_lonnymq import api, enqueue
from django_lonnymq.exceptions import ChannelNotDeleted
from django_lonnymq.models import Channel, DeadMessage
from tests.harness import helpers

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "orm_delete"


def emptied(name: str) -> Channel:
    """A channel that held a message, leased and acked it: empty."""
    enqueue(QUEUE, {"n": name}, channel=name)
    assert helpers.ack(helpers.dequeue(QUEUE, 10))
    return Channel.objects.get(queue=QUEUE, name=name)


def test_an_empty_channel_is_deleted_with_its_wake_up_marks() -> None:
    channel = emptied("a")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO lonnymq_wake (queue, channel_id, dequeue_at) VALUES (%s, %s, 0)", [QUEUE, channel.pk]
        )
    assert channel.delete() == (1, {"django_lonnymq.Channel": 1})
    assert channel.pk is None
    assert not Channel.objects.filter(queue=QUEUE).exists()
    assert helpers.scalar("SELECT count(*) FROM lonnymq_wake WHERE queue = %s", [QUEUE]) == 0
    # The next enqueue creates it again.
    message_id = enqueue(QUEUE, {"n": 2}, channel="a")
    assert [m["id"] for m in helpers.dequeue(QUEUE, 10)] == [message_id]


def test_a_queryset_with_a_channel_holding_messages_deletes_none_and_says_which() -> None:
    emptied("a")
    enqueue(QUEUE, {"n": 1}, channel="b")
    full = Channel.objects.get(queue=QUEUE, name="b")
    with pytest.raises(ChannelNotDeleted) as caught:
        Channel.objects.filter(queue=QUEUE).delete()
    assert (caught.value.channel_id, caught.value.outcome) == (full.pk, "not_empty")
    assert "holds messages" in str(caught.value)
    assert sorted(Channel.objects.filter(queue=QUEUE).values_list("name", flat=True)) == ["a", "b"]
    # Without the full one, the rest goes; a channel already gone counts for nothing.
    assert Channel.objects.filter(queue=QUEUE, name__in=["a", "zz"]).delete() == (
        1,
        {"django_lonnymq.Channel": 1},
    )
    assert Channel.objects.filter(queue=QUEUE, name="a").delete() == (0, {"django_lonnymq.Channel": 0})


def test_a_channel_a_producer_holds_is_busy_and_its_message_keeps_its_channel(connect) -> None:
    """The race Django's own delete lost: it looked for messages, found none, then waited for
    the producer's lock and deleted the channel under the message the producer committed."""
    channel = emptied("a")
    producer = connect(autocommit=False)
    producer.execute(
        "SELECT lonnymq_enqueue_v1(%s, 'a', '{}'::jsonb, NULL, NULL, 0, NULL, 5, 1000, 50)", [QUEUE]
    )
    with pytest.raises(ChannelNotDeleted) as caught:
        channel.delete()
    assert caught.value.outcome == "busy"
    producer.commit()
    assert Channel.objects.filter(pk=channel.pk).exists()
    assert len(helpers.dequeue(QUEUE, 10)) == 1
    assert not api.check()


def test_dead_letters_of_a_deleted_channel_stay_and_a_requeue_recreates_it() -> None:
    enqueue(QUEUE, {"n": 1}, channel="a", max_attempts=1)
    (leased,) = helpers.dequeue(QUEUE, 10)
    assert helpers.fail(leased) == "dead"
    dead = DeadMessage.objects.get(pk=leased["id"])
    Channel.objects.filter(queue=QUEUE, name="a").delete()
    dead.refresh_from_db()
    assert dead.channel_id is None and dead.channel_name == "a"
    assert api.requeue_dead([dead.pk]) == [dead.pk]
    assert Channel.objects.filter(queue=QUEUE, name="a").exists()


def test_an_unsaved_channel_cannot_be_deleted() -> None:
    with pytest.raises(ValueError, match="id is not set"):
        Channel(queue=QUEUE, name="new").delete()


def test_a_channel_whose_row_a_worker_holds_is_busy_at_once(connect) -> None:
    """A dequeuer holding the channel row makes the delete busy at once, never a wait: the
    function tries its locks."""
    emptied("a")
    holder = connect(autocommit=False)
    holder.execute("SELECT 1 FROM lonnymq_channel WHERE queue = %s FOR NO KEY UPDATE", [QUEUE])
    with pytest.raises(ChannelNotDeleted) as caught:
        Channel.objects.filter(queue=QUEUE).delete()
    assert caught.value.outcome == "busy"
    holder.rollback()
    assert Channel.objects.filter(queue=QUEUE).delete()[0] == 1
