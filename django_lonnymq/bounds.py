"""The bounds every name, number, duration, time and id keeps: the one place they are written.

Checked in Python (:mod:`django_lonnymq.arguments`) before anything is sent; the schema has
the same numbers (``sql/schema.sql``: CHECK constraints and the functions' argument checks),
so a value that passes here is accepted there, and no accepted value can overflow the
arithmetic of a later dequeue. Imports nothing: the Spark writer uses it without Django.
"""

from __future__ import annotations

from datetime import timedelta

# A run time or delay ahead of now, and a retry delay: 100 years.
MAX_AHEAD = timedelta(days=36_525)
# A release interval, the dashboard history kept, the dedup window: 366 days.
MAX_INTERVAL = timedelta(days=366)
# The same in milliseconds, as the schema's CHECKs write it.
MAX_INTERVAL_MS = 31_622_400_000
# A lease, a lease extension, a grace period: one day.
MAX_LEASE = timedelta(days=1)
# A worker's lease: at least one second.
MIN_LEASE = timedelta(seconds=1)
# A message's time (ms since the epoch): up to the last millisecond of the year 9999.
MAX_EPOCH_MS = 253_402_300_799_999
# Message and channel ids are bigint.
MAX_ID = 2**63 - 1
# Names, in characters.
MAX_QUEUE_NAME = 100
MAX_PLAN_NAME = 100
MAX_CHANNEL_NAME = 200
MAX_DEDUP_KEY = 200
# What a repeated dedup key does (on_duplicate); the SQL functions accept these alone.
DEDUP_MODES = ("skip", "replace", "update")
MAX_TOPIC_NAME = 200
MAX_SCHEDULE_NAME = 200
MAX_WORKER_NAME = 200
# Priority: 0 (none) to 100 steps earlier.
MAX_PRIORITY = 100
# Deliveries of one message.
MAX_ATTEMPTS = 1000
# Tokens of the rate limits one message takes (enqueue(cost=k)).
MAX_COST = 1_000_000
# Units of the concurrency caps one message's lease takes (enqueue(slots=k)).
MAX_SLOTS = 1_000_000
# LONNYMQ_MAX_SNOOZES: snoozes of one message before a snooze counts as a failed attempt.
MAX_SNOOZES = 1_000_000
# Messages a channel releases per round under backlog.
MAX_WEIGHT = 1000
# Messages leased by one dequeue.
MAX_BATCH = 10_000
# Messages one batch handler's call takes (@handler(batch=N)), and the longest a worker
# collects a channel's messages for one call (batch_wait).
MAX_HANDLER_BATCH = 1000
MAX_BATCH_WAIT = timedelta(minutes=5)
# A rate's count and burst ("N / period, burst B"; a period is at most MAX_INTERVAL).
MAX_RATE_COUNT = 1_000_000
MAX_RATE_BURST = 1_000_000
# A periodic schedule: its interval (at least a second, at most MAX_INTERVAL) and the missed
# ticks it enqueues after downtime.
MIN_EVERY = timedelta(seconds=1)
MAX_CATCH_UP = 1000
# A concurrency cap (a PostgreSQL integer).
MAX_INT4 = 2_147_483_647
# How deep a payload may nest: the level of its deepest value, the root being level 0
# ({"a": [1]}: the object is level 0, the list 1, the number 2). Python's json decoder
# recurses once per level and stops near 1,000, so a worker could not read a payload much
# deeper than that; the bound keeps a wide margin below it.
MAX_PAYLOAD_DEPTH = 100
# A payload or step output as PostgreSQL stores it (jsonb, before compression): the schema's
# pg_column_size CHECKs. Up to six times its JSON text ([1,1,...]: 12 bytes a number).
MAX_STORED_JSONB = 8_388_608
# A step's inputs: its parents' outputs, as stored, add up to at most 64 MiB (the schema's
# lonnymq_workflow_inputs_v2 and lonnymq_workflow_ack_v2). With their names, far below the
# 256 MB of PostgreSQL's largest jsonb value, and their text below the 1 GB a row can send.
MAX_STEP_INPUTS = 67_108_864
# Steps of one workflow (lonnymq_workflow_steps_range in the schema).
MAX_WORKFLOW_STEPS = 50_000
# A workflow's name, in characters.
MAX_WORKFLOW_NAME = 200
# Durable handlers (docs/durable.md): a step, sleep or wait name and an event key, in
# characters; a step's result and an event's payload as JSON text (at most 6 times that
# stored, under the schema's 1 MiB pg_column_size CHECKs); the longest sleep or wait timeout.
MAX_STEP_NAME = 200
MAX_EVENT_KEY = 200
MAX_STEP_RESULT = 131_072
MAX_SLEEP = timedelta(days=366)
