"""The counters a worker reports when it stops (and tests and benchmarks read)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Stats:
    """Counters of one worker. The control thread writes them, except ``handler_crashes``."""

    fetched: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    lease_lost: int = 0
    empty_fetches: int = 0
    reaped: int = 0
    pruned: int = 0
    reconnects: int = 0
    released: int = 0
    statement_errors: int = 0
    handler_crashes: int = 0
    timed_out: int = 0
    cancelled: int = 0
    abandoned: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def summary(self) -> str:
        elapsed = max(time.monotonic() - self.started_at, 1e-9)
        return (
            f"fetched={self.fetched} acked={self.acked} retried={self.retried} dead={self.dead} "
            f"lease_lost={self.lease_lost} released={self.released} reaped={self.reaped} pruned={self.pruned} "
            f"empty_fetches={self.empty_fetches} reconnects={self.reconnects} "
            f"statement_errors={self.statement_errors} timed_out={self.timed_out} "
            f"cancelled={self.cancelled} abandoned={self.abandoned} "
            f"elapsed={elapsed:.1f}s rate={self.acked / elapsed:.1f}/s"
        )
