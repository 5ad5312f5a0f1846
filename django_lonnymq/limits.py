"""The bounds every name, duration, time and id keeps, checked in Python before anything is sent.

The schema has the same numbers (``sql/schema.sql``: CHECK constraints and the functions'
argument checks), so a value that passes here is accepted there, and no accepted value can
overflow the arithmetic of a later dequeue.
"""

from __future__ import annotations

from datetime import timedelta

# A run time or delay ahead of now, and a retry delay: 100 years.
MAX_AHEAD = timedelta(days=36_525)
# A release interval, the dashboard history kept, the dedup window: 366 days.
MAX_INTERVAL = timedelta(days=366)
# A lease, a lease extension, a grace period: one day.
MAX_LEASE = timedelta(days=1)
# Message and channel ids are bigint.
MAX_ID = 2**63 - 1
# Names, in characters.
MAX_QUEUE_NAME = 100
MAX_CHANNEL_NAME = 200
MAX_DEDUP_KEY = 200
