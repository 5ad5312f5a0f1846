"""The worker, one module per job: :mod:`.loop` (the :class:`Worker` and its lifecycle),
:mod:`.connection`, :mod:`.fetching`, :mod:`.waiting`, :mod:`.handlers` and :mod:`.running`,
:mod:`.outcomes`, :mod:`.completion`, :mod:`.housekeeping`, :mod:`.observer` (with
:mod:`.spans`); :mod:`.group` runs a :class:`Worker` per database for a process whose queues
live on several. The metrics observer lives with the other metrics
(:mod:`django_lonnymq.prometheus.worker`)."""

from .group import WorkerGroup
from .loop import Worker
from .observer import Observer
from .stats import Stats

__all__ = ["Observer", "Stats", "Worker", "WorkerGroup"]
