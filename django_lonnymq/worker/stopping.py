"""SIGTERM/SIGINT for a worker process: the first lets running handlers finish, the second
exits at once. Shared by :class:`~.loop.Worker` and :class:`~.group.WorkerGroup`."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

logger = logging.getLogger("django_lonnymq.worker")


class StopOnSignal:
    """Needs ``_stopping`` (an Event set by ``stop``), ``stop()``, ``force_stop()`` and
    ``shutdown_timeout`` (seconds) from the class it is mixed into."""

    _stopping: threading.Event
    shutdown_timeout: float

    def stop(self, *_: Any) -> None:
        raise NotImplementedError

    def force_stop(self) -> None:
        raise NotImplementedError

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self._stopping.is_set():
            logger.warning("received %s again: exiting at once", signal.Signals(signum).name)
            self.force_stop()
        else:
            logger.warning(
                "received %s: letting running handlers finish (up to %gs); send it again to exit at once",
                signal.Signals(signum).name,
                self.shutdown_timeout,
            )
            self.stop()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
