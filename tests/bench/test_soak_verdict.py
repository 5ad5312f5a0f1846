"""bench.soak's verdict: the medians of the first and last windows of its 10 s samples, and
what grew (more than 25% and more than a floor)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import soak

# django_independent: bench.soak's arithmetic, no Django (CONTRIBUTING.md)
pytestmark = pytest.mark.django_independent


def _samples(index_kb: Any, dead: Any = lambda t: 2000, p50: Any = lambda t: 0.8) -> list[dict[str, Any]]:
    return [
        {
            "t": float(t),
            "enqueued": 300 * t,
            "backlog": 5,
            "p50": p50(t),
            "p99": 5.0,
            "load": 4.0,
            "tables": {
                "lonnymq_channel": {
                    "live": 200,
                    "dead": dead(t),
                    "size": 344 * 1024,
                    "autovacuum": t // 60,
                    "vacuum": t // 30,
                },
            },
            "indexes": {"lonnymq_channel_pkey": int(index_kb(t) * 1024)},
        }
        for t in range(0, 1801, 10)
    ]


def test_a_steady_run_is_flat() -> None:
    rows, grew = soak.compare(_samples(lambda t: 400), 300, 1800)
    assert grew == []
    figures = {name: (first, last) for name, first, last in rows}
    assert figures["enqueue rate (msg/s)"] == (300, 300)
    assert figures["drain rate (msg/s)"] == (300, 300)
    assert figures["lonnymq_channel: autovacuums in the window"] == (5, 5)
    assert figures["index lonnymq_channel_pkey: size (kB)"] == (400, 400)


def test_what_grew_is_named_with_its_figures() -> None:
    rows, grew = soak.compare(
        _samples(lambda t: 400 + t, dead=lambda t: 2000 + 10 * t, p50=lambda t: 0.8 + t / 1000), 300, 1800
    )
    assert [g.split(" ")[0:2] for g in grew] == [
        ["probe", "dequeue"],
        ["lonnymq_channel:", "dead"],
        ["index", "lonnymq_channel_pkey"],
    ]
    assert "550 kB -> 2,050 kB (3.73x)" in grew[2]


def test_growth_under_the_floor_is_flat() -> None:
    # 8 kB -> 24 kB is 3x, but less than 8 pages: noise of a small index, not growth
    rows, grew = soak.compare(_samples(lambda t: 8 if t < 900 else 24), 300, 1800)
    assert grew == []
