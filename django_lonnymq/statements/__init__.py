"""The statement layer: one Python function per named statement of ``sql/*.sql``.

It is the only code that knows statement names and parameter shapes, and which statements bind
their arrays on the server: callers call ``statements.ack(ids=..., tokens=..., on=...)``, never
``db.value("ack", {...})`` (tests/house/test_statements.py keeps it so). Each function runs
through ``db.py``, on what ``on`` names:

- ``None`` or a Django alias: Django's connection, in the caller's transaction;
- a psycopg connection the caller holds (the schedules' tick, the durable duty);
- an executor of the lifecycle (``worker/lifecycle.py``): the worker's control connection, or
  eager mode's Django connection.
"""

from __future__ import annotations

from .durable import *  # noqa: F403
from .enqueue import *  # noqa: F403
from .lifecycle import *  # noqa: F403
from .maintenance import *  # noqa: F403
from .operations import *  # noqa: F403
from .progress import *  # noqa: F403
from .reading import *  # noqa: F403
from .running import FUNCTIONS as FUNCTIONS
from .running import On as On
from .running import Row as Row
from .workflows import *  # noqa: F403
