"""api.consume(): a channel's token bucket spent outside jobs, shared with the dequeue."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.http import HttpResponse
from django.test import RequestFactory

from django_lonnymq import api, enqueue_many
from django_lonnymq.exceptions import InvalidArgument
from django_lonnymq.limits import Consumed, rate_limited
from tests.harness.helpers import channel_row, dequeue, scalar


def _state(queue: str, name: str) -> tuple:
    row = channel_row(queue, name)
    return (row["bucket_level"], row["last_dequeue_at"], row["next_token_at"], row["next_dequeue_at"])


@pytest.mark.django_db
def test_consume_takes_tokens_until_the_bucket_is_empty_then_says_when():
    api.configure_channel("q_consume", "t1", rate="1 / min, burst 3")
    assert api.consume("q_consume", "t1", 2) == Consumed(True, 0.0)
    got = api.consume("q_consume", "t1", 2)
    assert not got.ok and not got
    # One token is left; the second comes back a minute (at most) after the first spend.
    assert 0 < got.retry_after <= 60.0
    assert api.consume("q_consume", "t1").ok
    assert not api.consume("q_consume", "t1").ok


@pytest.mark.django_db
def test_consume_and_the_dequeue_spend_one_bucket():
    api.configure_channel("q_consume", "t2", rate="1 / min, burst 3")
    enqueue_many("q_consume", [{"n": n} for n in range(5)], channel="t2")
    assert api.consume("q_consume", "t2", 2).ok
    # One token left for jobs: the dequeue releases one, not three.
    assert len(dequeue("q_consume", batch=10)) == 1
    assert len(dequeue("q_consume", batch=10)) == 0
    assert not api.consume("q_consume", "t2").ok
    row = channel_row("q_consume", "t2")
    # The channel's next turn waits for its next token.
    assert row["next_dequeue_at"] >= row["next_token_at"] > scalar("SELECT lonnymq_now_ms_v1()")


@pytest.mark.django_db
def test_a_refusal_writes_nothing():
    api.configure_channel("q_consume", "t3", rate="1 / min, burst 1")
    assert api.consume("q_consume", "t3").ok
    before = _state("q_consume", "t3")
    assert not api.consume("q_consume", "t3").ok
    assert _state("q_consume", "t3") == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("channel", "tokens", "field", "rule"),
    [
        ("t4", 0, "tokens", "must be between 1 and 1000000"),
        ("t4", -3, "tokens", "must be between 1 and 1000000"),
        ("t4", 1.5, "tokens", "must be an integer"),
        ("t4", True, "tokens", "must be an integer"),
        ("t4", "2", "tokens", "must be an integer"),
        ("t4", 6, "tokens", "must be at most the bucket's capacity (burst 5)"),
        ("nobody", 1, "channel", "must name a channel of queue 'q_consume'"),
        ("unlimited", 1, "channel", "must have a rate limit to consume from"),
        ("", 1, "channel", None),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(channel, tokens, field, rule):
    api.configure_channel("q_consume", "t4", rate="10 / min, burst 5")
    api.configure_channel("q_consume", "unlimited", max_concurrency=3)
    before = {name: _state("q_consume", name) for name in ("t4", "unlimited")}
    # A savepoint: the SQL function's refusal aborts the transaction it runs in.
    with pytest.raises(InvalidArgument) as caught, transaction.atomic():
        api.consume("q_consume", channel, tokens)
    assert caught.value.field == field
    if rule is not None:
        assert caught.value.rule == rule
    assert {name: _state("q_consume", name) for name in ("t4", "unlimited")} == before
    assert scalar("SELECT count(*) FROM lonnymq_channel WHERE queue = 'q_consume'") == 2


@pytest.mark.django_db
def test_the_sql_function_refuses_what_python_would():
    api.configure_channel("q_consume", "t5", rate="10 / min, burst 5")
    for tokens in (0, -1, None, 6):
        with pytest.raises(Exception, match="tokens"), transaction.atomic():
            scalar("SELECT ok FROM lonnymq_consume_v1('q_consume', 't5', %s)", [tokens])


@pytest.mark.django_db
def test_rate_limited_view_answers_429_with_retry_after():
    api.configure_channel("q_consume", "acme", rate="1 / min, burst 1")

    @rate_limited("q_consume", channel=lambda request: request.GET["tenant"])
    def view(request):
        return HttpResponse("ok")

    request = RequestFactory().get("/export", {"tenant": "acme"})
    assert view(request).status_code == 200
    refused = view(request)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
