-- Named queries the Python layer runs. Each "-- name: X" header starts a query; the loader
-- (django_lonnymq/sql/__init__.py) parses this file once. Parameters use %(name)s, each cast
-- to the exact type of the function's argument, and every call passes every argument (none
-- left to its default), so that the call resolves to the app's function whatever overloads
-- another role has created on the search path (tests/integration/test_search_path_attack.py).

-- name: enqueue
SELECT lonnymq_enqueue_v4(%(queue)s::text, %(channel)s::text, %(payload)s::jsonb, %(run_at_ms)s::bigint,
                          %(delay_ms)s::bigint, %(priority)s::integer, %(dedup_key)s::text,
                          %(on_duplicate)s::text, %(max_attempts)s::integer, %(priority_step_ms)s::bigint, %(tolerance_ms)s::bigint,
                          %(cost)s::integer, %(slots)s::integer)

-- name: enqueue_many
SELECT lonnymq_enqueue_many_v4(%(queue)s::text, %(channels)s::text[], %(payloads)s::jsonb[],
                               %(run_at_ms)s::bigint[], %(delay_ms)s::bigint[], %(priorities)s::integer[],
                               %(dedup_keys)s::text[], %(on_duplicate)s::text[], %(max_attempts)s::integer[],
                               %(default_max_attempts)s::integer, %(priority_step_ms)s::bigint,
                               %(tolerance_ms)s::bigint, %(costs)s::integer[], %(slots)s::integer[])

-- name: enqueue_task
-- A Django Task: its message and its result row (django_lonnymq.tasks).
SELECT lonnymq_enqueue_task_v1(%(queue)s::text, %(channel)s::text, %(payload)s::jsonb, %(run_at_ms)s::bigint,
                               %(priority)s::integer, %(max_attempts)s::integer, %(run_after)s::timestamptz,
                               %(enqueued_at)s::timestamptz, %(priority_step_ms)s::bigint,
                               %(tolerance_ms)s::bigint)

-- name: enqueue_task_keyed
-- A Django Task with a dedup key: the result row of the message it created, changed or
-- skipped to, and the outcome ('created', 'changed', 'skipped').
SELECT (k.result).*, k.outcome
  FROM lonnymq_enqueue_task_keyed_v1(%(queue)s::text, %(channel)s::text, %(payload)s::jsonb, %(run_at_ms)s::bigint,
                                     %(priority)s::integer, %(max_attempts)s::integer, %(run_after)s::timestamptz,
                                     %(enqueued_at)s::timestamptz, %(dedup_key)s::text, %(on_duplicate)s::text,
                                     %(priority_step_ms)s::bigint, %(tolerance_ms)s::bigint) k

-- name: enqueue_traced
-- enqueue, and the trace context of the recording span around it, in one statement (the
-- first enqueue of a dedup key keeps its own context).
WITH m AS MATERIALIZED (
    SELECT lonnymq_enqueue_v4(%(queue)s::text, %(channel)s::text, %(payload)s::jsonb, %(run_at_ms)s::bigint,
                              %(delay_ms)s::bigint, %(priority)s::integer, %(dedup_key)s::text,
                              %(on_duplicate)s::text, %(max_attempts)s::integer, %(priority_step_ms)s::bigint, %(tolerance_ms)s::bigint,
                              %(cost)s::integer, %(slots)s::integer) AS id
), t AS (
    INSERT INTO lonnymq_trace (message_id, context) SELECT m.id, %(context)s::jsonb FROM m
    ON CONFLICT (message_id) DO NOTHING
)
SELECT m.id FROM m

-- name: enqueue_many_traced
WITH m AS MATERIALIZED (
    SELECT lonnymq_enqueue_many_v4(%(queue)s::text, %(channels)s::text[], %(payloads)s::jsonb[],
                                   %(run_at_ms)s::bigint[], %(delay_ms)s::bigint[], %(priorities)s::integer[],
                                   %(dedup_keys)s::text[], %(on_duplicate)s::text[], %(max_attempts)s::integer[],
                                   %(default_max_attempts)s::integer, %(priority_step_ms)s::bigint,
                                   %(tolerance_ms)s::bigint, %(costs)s::integer[], %(slots)s::integer[]) AS ids
), t AS (
    INSERT INTO lonnymq_trace (message_id, context)
    SELECT i.id, %(context)s::jsonb FROM m CROSS JOIN LATERAL pg_catalog.unnest(m.ids) AS i(id)
    ON CONFLICT (message_id) DO NOTHING
)
SELECT m.ids FROM m

-- name: dequeue
-- Every argument is passed, the last (p_recheck_ms) at its default value: left to its
-- default, PostgreSQL could not choose between this function and a look-alike whose
-- arguments match the five passed (AmbiguousFunction, and every worker stops).
-- The workflow steps among the messages come with their name, parents' outputs and the bytes
-- these take (NULL for other messages; the outputs NULL past their bound), read after the
-- dequeue (lonnymq_workflow_inputs_v2 takes its own snapshot); the rows keep the dequeue's
-- order. A batch without steps never calls it (the
-- filter on the ids comes first): the join costs it about 0.08 ms on a 3 ms dequeue of 50.
-- The lease commits without waiting for its WAL flush (synchronous_commit off for this
-- statement's transaction only): the handler starts 0.25-0.6 ms sooner, the whole gap in idle
-- latency between the worker's synchronous_commit on and off (docs/performance.md). The
-- worker's next commit with the setting on (the ack or failure of these messages, or any
-- other) flushes the WAL up to it, so no outcome is ever recorded over a lease a crash could
-- undo; the WAL writer flushes it within 200 ms otherwise (docs/failure-model.md).
WITH d AS MATERIALIZED (
    SELECT d.id, d.channel, d.payload, d.attempts, d.max_attempts, d.priority, d.dedup_key, d.enqueued_at,
           d.lease_token, d.lease_until, d.ordinality
      FROM lonnymq_dequeue_v1(%(queue)s::text, %(batch_size)s::integer, %(lease_ms)s::bigint, %(worker)s::text,
                              %(tolerance_ms)s::bigint, 100::bigint) WITH ORDINALITY AS d
), lease_commit AS MATERIALIZED (
    SELECT pg_catalog.set_config('synchronous_commit', 'off', true) AS setting
)
SELECT d.id, d.channel, d.payload, d.attempts, d.max_attempts, d.priority, d.dedup_key, d.enqueued_at,
       d.lease_token, d.lease_until, i.name, i.outputs, i.inputs_bytes
  FROM d LEFT JOIN (SELECT f.id, f.name, f.outputs, f.inputs_bytes
                      FROM (SELECT pg_catalog.array_agg(x.id) AS ids FROM d x
                             WHERE pg_catalog.starts_with(x.dedup_key, 'lonnymq.step:')) s
                     CROSS JOIN LATERAL lonnymq_workflow_inputs_v2(s.ids) f
                     WHERE s.ids IS NOT NULL) i ON i.id = d.id
 CROSS JOIN lease_commit
 ORDER BY d.ordinality

-- name: next_due
SELECT lonnymq_next_due_v1(%(queues)s::text[]) - lonnymq_now_ms_v1()

-- name: ack
SELECT lonnymq_ack_v1(%(ids)s::bigint[], %(tokens)s::uuid[])

-- name: fail
-- reason: failed | timeout (retried until the attempts are used up) | discarded | cancelled
SELECT lonnymq_fail_v2(%(id)s::bigint, %(token)s::uuid, %(error)s::text, %(retry_delay_ms)s::bigint,
                       %(reason)s::text, %(backoff_base_ms)s::bigint, %(backoff_max_ms)s::bigint,
                       %(tolerance_ms)s::bigint)

-- name: snooze
-- Returns snoozed | retry | dead (past max_snoozes the snooze is a failed attempt).
SELECT lonnymq_snooze_v1(%(id)s::bigint, %(token)s::uuid, %(delay_ms)s::bigint, %(max_snoozes)s::integer,
                         %(backoff_base_ms)s::bigint, %(backoff_max_ms)s::bigint, %(tolerance_ms)s::bigint)

-- name: extend
-- The heartbeat: one row per lease extended, with whether someone asked to cancel it.
SELECT id, cancel_requested FROM lonnymq_extend_v2(%(ids)s::bigint[], %(tokens)s::uuid[], %(lease_ms)s::bigint)

-- name: release
SELECT lonnymq_release_v1(%(ids)s::bigint[], %(tokens)s::uuid[], %(tolerance_ms)s::bigint)

-- name: reap
SELECT lonnymq_reap_v1(%(limit)s::integer, %(dedup_window_ms)s::bigint, %(tolerance_ms)s::bigint)

-- name: vacuum_due
-- The queue's churned tables (a channel row is rewritten by every release and its turn is
-- in the pick index, so no such update is HOT; wake-up marks are inserted and deleted; the
-- messages, vacuumed by the workers only once a held horizon moves on) that this role may
-- vacuum (it owns them, or is a member of their owner's role), with whether their dead row
-- versions passed %(threshold)s plus a fifth of their live rows. Read from the statistics
-- counters: no table is scanned. horizon: the oldest xmin or transaction id of this
-- database's other sessions, WAL senders, prepared transactions and replication slots
-- (what VACUUM may remove nothing after), as text: the worker compares it between looks to
-- learn that a horizon holding VACUUM back has moved (horizon_holders lists the same).
SELECT c.relname::text,
       pg_catalog.pg_stat_get_dead_tuples(c.oid)
       OPERATOR(pg_catalog.>=) (%(threshold)s::bigint
                                OPERATOR(pg_catalog.+) (pg_catalog.pg_stat_get_live_tuples(c.oid) OPERATOR(pg_catalog./) 5)),
       (SELECT (pg_catalog.array_agg(h.x ORDER BY pg_catalog.age(h.x) DESC))[1]::text
          FROM (SELECT a.backend_xmin FROM pg_catalog.pg_stat_activity a
                 WHERE (a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
                        OR a.backend_type OPERATOR(pg_catalog.=) 'walsender')
                   AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() AND a.backend_xmin IS NOT NULL
                UNION ALL
                SELECT a.backend_xid FROM pg_catalog.pg_stat_activity a
                 WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
                   AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() AND a.backend_xid IS NOT NULL
                UNION ALL
                SELECT p.transaction FROM pg_catalog.pg_prepared_xacts p
                 WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
                UNION ALL
                SELECT s.xmin FROM pg_catalog.pg_replication_slots s WHERE s.xmin IS NOT NULL) h(x))
  FROM pg_catalog.pg_class c
 WHERE c.relname OPERATOR(pg_catalog.=) ANY (ARRAY['lonnymq_channel', 'lonnymq_message', 'lonnymq_wake']::name[])
   AND c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.current_schema()::regnamespace
   AND pg_catalog.pg_has_role(c.relowner, 'USAGE')
 ORDER BY c.relname

-- name: vacuum_channel
-- The worker's housekeeping when vacuum_due names the table (runs outside a transaction;
-- SKIP_LOCKED: another worker's VACUUM of it is enough).
VACUUM (SKIP_LOCKED) lonnymq_channel

-- name: vacuum_wake
VACUUM (SKIP_LOCKED) lonnymq_wake

-- name: vacuum_message
-- Only once a horizon that held VACUUM back has moved on (the worker's housekeeping).
VACUUM (SKIP_LOCKED) lonnymq_message

-- name: requeue_dead
SELECT lonnymq_requeue_dead_v1(%(ids)s::bigint[], %(reset_attempts)s::boolean, %(tolerance_ms)s::bigint)

-- name: cancel
-- Waiting messages are deleted (a waiting workflow step goes to the dead letters as
-- 'cancelled', which fails its workflow), running ones marked (running = true). When one was running,
-- NOTIFY lonnymq_cancel (at commit) wakes the workers: those holding leases run their
-- heartbeat at once, which reads the mark, instead of a third of the lease later.
WITH cancelled AS MATERIALIZED (
    SELECT id, running FROM lonnymq_cancel_v3(%(ids)s::bigint[], %(missing_ok)s::boolean)
)
SELECT c.id, c.running FROM cancelled c
 WHERE (SELECT pg_catalog.count(pg_catalog.pg_notify('lonnymq_cancel', ''))
          FROM cancelled r WHERE r.running) >= 0

-- name: run_now
SELECT lonnymq_run_now_v1(%(ids)s::bigint[], %(tolerance_ms)s::bigint)

-- name: purge_channel
SELECT lonnymq_purge_channel_v1(%(channel_id)s::bigint)

-- name: record_samples
-- One sample per queue for the dashboard's history, pruning old ones.
-- Exact up to `cap` waiting messages per queue, estimated past it (`estimated`).
SELECT * FROM lonnymq_record_samples_v3(%(keep_ms)s::bigint, %(cap)s::bigint)

-- name: delete_channel
SELECT lonnymq_delete_channel_v1(%(id)s::bigint)

-- name: purge_dead
SELECT lonnymq_purge_dead_v1(%(ids)s::bigint[])

-- name: configure_channel
-- A NULL limit is left as it is; unlimited removes the concurrency cap, no_rate the bucket.
-- A limit given becomes the channel's own; inherit lists those that follow its plan again.
SELECT lonnymq_configure_channel_v4(%(queue)s::text, %(channel)s::text, %(max_concurrency)s::integer,
                                    %(unlimited)s::boolean, %(release_interval_ms)s::bigint,
                                    %(paused)s::boolean, %(weight)s::integer, %(rate_count)s::integer,
                                    %(rate_period_ms)s::bigint, %(rate_burst)s::integer,
                                    %(no_rate)s::boolean, %(plan)s::text, %(no_plan)s::boolean,
                                    %(inherit)s::text[])

-- name: configure_plan
-- Create or change a plan and rewrite its channels' limits and order; how many channels changed.
SELECT lonnymq_configure_plan_v2(%(name)s::text, %(weight)s::integer, %(max_concurrency)s::integer,
                                 %(unlimited)s::boolean, %(release_interval_ms)s::bigint,
                                 %(rate_count)s::integer, %(rate_period_ms)s::bigint, %(rate_burst)s::integer,
                                 %(no_rate)s::boolean, %(ordered)s::boolean)

-- name: delete_plan
SELECT lonnymq_delete_plan_v1(%(name)s::text)

-- name: configure_queue_plan
-- configure_queue with a default plan (NULL: none) for the queue's new channels, set first,
-- in the same statement.
SELECT lonnymq_configure_queue_v1(%(queue)s::text, %(max_concurrency)s::integer, %(unlimited)s::boolean,
                                  %(rate_count)s::integer, %(rate_period_ms)s::bigint, %(rate_burst)s::integer,
                                  %(no_rate)s::boolean)
  FROM (SELECT lonnymq_set_default_plan_v1(%(queue)s::text, %(plan)s::text)) AS default_plan

-- name: configure_queue
-- Queue-wide limits: a NULL limit is left as it is; unlimited removes the cap, no_rate the bucket.
SELECT lonnymq_configure_queue_v1(%(queue)s::text, %(max_concurrency)s::integer, %(unlimited)s::boolean,
                                  %(rate_count)s::integer, %(rate_period_ms)s::bigint, %(rate_burst)s::integer,
                                  %(no_rate)s::boolean)

-- name: pause_queue
-- Pause (paused = true) or resume a whole queue; whether its state changed.
SELECT lonnymq_pause_queue_v1(%(queue)s::text, %(paused)s::boolean)

-- name: check
SELECT x.channel_id, x.queue, x.channel, x.problem, x.detail
  FROM (SELECT * FROM lonnymq_check_v2(%(grace_ms)s::bigint)
        UNION ALL
        SELECT * FROM lonnymq_check_limits_v2()) x
 ORDER BY x.channel_id, x.problem, x.detail

-- name: listen
LISTEN lonnymq_wakeup

-- name: listen_cancels
-- A message a worker holds was cancelled (the cancel statement notifies): run the heartbeat.
LISTEN lonnymq_cancel

-- name: queues_with_ready_work
-- Queues with a channel that has a turn, or a wake-up mark waiting to give it one (the
-- health command's dequeue probe).
SELECT c.queue FROM lonnymq_channel c WHERE c.next_dequeue_at IS NOT NULL AND NOT c.paused
UNION
SELECT w.queue FROM lonnymq_wake w
 ORDER BY 1

-- name: pending
-- Burst workers stop when their queues hold nothing ready now and nothing in flight. A burst
-- worker asks after each empty fetch, most often while the others still hold leases: the
-- leases first, from the latest (under a held snapshot the lease index keeps an entry for
-- every lease taken since, all of them earlier), each joined to its channel's key (one row
-- version, where the channel row has one per visit); the ready messages only when none is
-- in flight.
-- (A scalar subquery: PostgreSQL drops the ORDER BY of an EXISTS.)
SELECT (SELECT 1 FROM lonnymq_message m JOIN lonnymq_channel_key k ON k.id = m.channel_id
         WHERE m.lease_until IS NOT NULL AND k.queue = ANY (%(queues)s::text[])
         ORDER BY m.lease_until DESC LIMIT 1) IS NOT NULL
       OR EXISTS (
           SELECT 1 FROM lonnymq_channel c
            WHERE c.queue = ANY (%(queues)s::text[]) AND NOT c.paused
              AND EXISTS (SELECT 1 FROM lonnymq_message m
                           WHERE m.channel_id = c.id AND m.lease_until IS NULL
                             AND m.dequeue_at <= lonnymq_now_ms_v1()))

-- name: worker_beat
-- A worker's heartbeat row (django_lonnymq/workers.py); returns the name it holds.
SELECT lonnymq_worker_beat_v1(%(name)s::text, %(instance)s::uuid, %(host)s::text, %(pid)s::integer,
                              %(queues)s::text[], %(concurrency)s::integer, %(started_at)s::timestamptz,
                              %(in_flight)s::integer, %(processed)s::bigint, %(failed)s::bigint,
                              %(lost_after_ms)s::bigint, %(prune_after_ms)s::bigint)

-- name: worker_stop
SELECT lonnymq_worker_stop_v1(%(name)s::text, %(instance)s::uuid, %(in_flight)s::integer,
                              %(processed)s::bigint, %(failed)s::bigint)

-- name: publish
-- One row per subscribed queue: its message ids in event order (django_lonnymq/topics.py).
SELECT queue, ids FROM lonnymq_publish_v4(%(topic)s::text, %(keys)s::text[], %(payloads)s::jsonb[],
                                          %(run_at_ms)s::bigint[], %(dedup_keys)s::text[], %(on_duplicate)s::text[],
                                          %(default_max_attempts)s::integer, %(priority_step_ms)s::bigint,
                                          %(tolerance_ms)s::bigint, %(costs)s::integer[], %(slots)s::integer[])

-- name: subscribe
SELECT lonnymq_subscribe_v1(%(topics)s::text[], %(queues)s::text[])

-- name: now_ms
SELECT lonnymq_now_ms_v1()

-- name: claim_schedules
-- Due schedules of the worker's queues (at %(now_ms)s, or the database's clock when NULL),
-- locked until the caller's transaction ends: other workers skip them. One probe of
-- lonnymq_schedule_due_idx per queue; nothing due reads no table row.
WITH now AS MATERIALIZED (SELECT coalesce(%(now_ms)s::bigint, lonnymq_now_ms_v1()) AS ms)
SELECT s.id, s.cron, s.every_ms, s.timezone, s.catch_up, s.next_tick_at, now.ms
  FROM now, lonnymq_schedule s
 WHERE s.enabled AND s.queue = ANY (%(queues)s::text[]) AND s.next_tick_at <= now.ms
 ORDER BY s.next_tick_at
 LIMIT %(limit)s::integer
   FOR UPDATE OF s SKIP LOCKED

-- name: fire_schedule
SELECT lonnymq_fire_schedule_v1(%(id)s::bigint, %(claimed_at)s::bigint, %(ticks)s::bigint[],
                                %(next_tick_at)s::bigint, %(error)s::text, %(default_max_attempts)s::integer,
                                %(priority_step_ms)s::bigint, %(tolerance_ms)s::bigint)

-- name: sync_schedules
SELECT added, changed, removed
  FROM lonnymq_sync_schedules_v2(%(queues)s::text[], %(names)s::text[], %(declared)s::jsonb[],
                                 %(next_tick_ats)s::bigint[])

-- name: record_samples_due
-- Workers: one sample per queue when none is newer than the interval (one recorder at a time).
SELECT lonnymq_record_samples_due_v2(%(interval_ms)s::bigint, %(keep_ms)s::bigint, %(cap)s::bigint)

-- name: trace_load
SELECT t.message_id, t.context FROM lonnymq_trace t WHERE t.message_id = ANY (%(ids)s::bigint[])

-- name: trace_prune
-- Trace contexts of messages that are gone (acked, dead, cancelled), kept a while for the
-- worker that still runs them.
DELETE FROM lonnymq_trace t
 WHERE t.created_at < pg_catalog.now() - pg_catalog.make_interval(secs => %(older_than_s)s::double precision)
   AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = t.message_id)

-- name: messages_present
-- Workers: which of these messages are still in the table (an ack re-sent after the
-- connection dropped finds its message gone when the first one committed).
SELECT m.id FROM lonnymq_message m WHERE m.id = ANY (%(ids)s::bigint[])

-- name: prune_channels
-- Idle, empty channels nobody configured, deleted in one batch (the workers' housekeeping).
SELECT lonnymq_prune_channels_v1(%(idle_ms)s::bigint, %(limit)s::integer)
-- name: workflow_start
-- A workflow, its steps and edges, and the messages of its steps without parents, in the
-- caller's transaction (django_lonnymq.workflows).
SELECT lonnymq_workflow_start_v1(%(name)s::text, %(channel)s::text, %(names)s::text[], %(queues)s::text[],
                                 %(channels)s::text[], %(payloads)s::jsonb[], %(delays_ms)s::bigint[],
                                 %(max_attempts)s::integer[], %(edge_parents)s::integer[],
                                 %(edge_children)s::integer[], %(on_failure_queue)s::text,
                                 %(on_failure_channel)s::text, %(on_failure_payload)s::jsonb,
                                 %(on_failure_max_attempts)s::integer, %(tolerance_ms)s::bigint)

-- name: workflow_ack
-- The worker's ack of step messages: ack, record outputs, release ready children.
SELECT lonnymq_workflow_ack_v2(%(ids)s::bigint[], %(tokens)s::uuid[], %(outputs)s::jsonb[], %(tolerance_ms)s::bigint)

-- name: workflow_cancel
WITH marked AS MATERIALIZED (
    SELECT lonnymq_workflow_cancel_v1(%(id)s::bigint) AS running
)
SELECT coalesce(pg_catalog.cardinality(m.running), 0) FROM marked m

-- name: workflow_state
SELECT w.id, w.name, w.channel, w.state, w.steps, w.remaining, w.dead, w.created_at, w.finished_at,
       w.on_failure_message_id
  FROM lonnymq_workflow w WHERE w.id = %(id)s::bigint

-- name: workflow_steps
-- A workflow's steps (running: its message is leased now; cancelled: queued, its message
-- deleted by a purge, which leaves the step row as it was; api.check() reports such a step),
-- with their parents' ids.
SELECT s.id, s.name, s.queue, s.channel,
       CASE WHEN s.state = 'queued' AND m.id IS NULL THEN 'cancelled'
            WHEN s.state = 'queued' AND m.lease_until IS NOT NULL THEN 'running' ELSE s.state END,
       s.output, s.created_at, s.released_at, s.finished_at, m.attempts,
       s.parents
  FROM lonnymq_workflow_step s LEFT JOIN lonnymq_message m ON m.id = s.id
 WHERE s.workflow_id = %(id)s::bigint
 ORDER BY s.id

-- name: workflow_prune
SELECT lonnymq_workflow_prune_v1(%(older_than_ms)s::bigint, %(limit)s::integer)

-- name: workflow_check
SELECT queue, channel, problem, detail FROM lonnymq_workflow_check_v1() ORDER BY workflow_id, step_id, problem

-- name: workflow_failed_steps
-- The dead steps of a workflow (their messages are in the dead-letter table).
SELECT s.id FROM lonnymq_workflow_step s JOIN lonnymq_dead_message d ON d.id = s.id
 WHERE s.workflow_id = %(id)s::bigint AND s.state = 'dead' ORDER BY s.id

-- name: step_get
-- A message's checkpoint of that name, if any: kind, result (JSON text), done.
SELECT s.kind, s.result::text, s.done FROM lonnymq_step s WHERE s.message_id = %(id)s::bigint AND s.name = %(name)s::text

-- name: step_save
SELECT lonnymq_step_save_v1(%(id)s::bigint, %(token)s::uuid, %(name)s::text, %(result)s::jsonb)

-- name: durable_pause
SELECT p.state, p.result::text, p.until_ms
  FROM lonnymq_durable_pause_v1(%(id)s::bigint, %(token)s::uuid, %(name)s::text, %(key)s::text, %(delay_ms)s::bigint) p

-- name: suspend
-- Returns suspended | dead (the message was cancelled while it ran).
SELECT lonnymq_suspend_v1(%(id)s::bigint, %(token)s::uuid, %(name)s::text, %(tolerance_ms)s::bigint)

-- name: emit_event
-- The ids of the waiting messages woken; NULL when the key was emitted already.
SELECT lonnymq_emit_event_v1(%(key)s::text, %(payload)s::jsonb, %(tolerance_ms)s::bigint)

-- name: resume
SELECT lonnymq_resume_v1(%(ids)s::bigint[], %(tolerance_ms)s::bigint)

-- name: forget_steps
SELECT lonnymq_forget_steps_v1(%(id)s::bigint, %(name)s::text)

-- name: durable_prune
SELECT lonnymq_durable_prune_v1(%(event_retention_ms)s::bigint, %(limit)s::integer)

-- name: message_steps
-- The admin: a message's checkpoints in order, each result cut to `chars` characters.
SELECT s.name, s.kind, s.created_at, pg_catalog.left(s.result::text, %(chars)s::integer),
       pg_catalog.octet_length(s.result::text), s.event_key, s.until_ms, s.done
  FROM lonnymq_step s WHERE s.message_id = %(id)s::bigint ORDER BY s.created_at, s.name

-- name: suspended_counts
-- Suspended messages per queue: waiting (not leased) with a pending sleep or wait whose time
-- is not up (a resumed one is due: its next run ends the wait).
SELECT c.queue, pg_catalog.count(DISTINCT s.message_id)
  FROM lonnymq_step s
  JOIN lonnymq_message m ON m.id = s.message_id AND m.lease_until IS NULL
  JOIN lonnymq_channel c ON c.id = m.channel_id
 WHERE s.kind <> 'step' AND NOT s.done
   AND (s.until_ms IS NULL
        OR s.until_ms > (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000)::bigint)
 GROUP BY c.queue ORDER BY c.queue

-- name: consume
-- Take tokens of a channel's token bucket for work done outside a job (api.consume).
SELECT ok, retry_after_ms FROM lonnymq_consume_v1(%(queue)s::text, %(channel)s::text, %(tokens)s::integer)

-- name: progress
-- Handlers' latest progress reports, one per message (message.progress(); worker/progress.py).
SELECT lonnymq_progress_v1(%(ids)s::bigint[], %(queues)s::text[], %(channels)s::text[],
                           %(done)s::double precision[], %(totals)s::double precision[], %(notes)s::text[])

-- name: progress_prune
SELECT lonnymq_progress_prune_v1(%(retention_ms)s::bigint, %(limit)s::integer)

-- name: message_status
-- A message's state and its last progress report (api.message_status): running, suspended,
-- scheduled or ready while in the queue, dead in the dead letters, finished once gone with
-- its progress kept; no row: the queue knows nothing of it (any more).
WITH s AS (
    SELECT CASE WHEN m.lease_until IS NOT NULL THEN 'running'
                WHEN EXISTS (SELECT 1 FROM lonnymq_step st
                              WHERE st.message_id = m.id AND st.kind <> 'step' AND NOT st.done
                                AND (st.until_ms IS NULL OR st.until_ms > lonnymq_now_ms_v1())) THEN 'suspended'
                WHEN m.dequeue_at > lonnymq_now_ms_v1() THEN 'scheduled'
                ELSE 'ready' END AS state,
           c.queue, c.name AS channel, m.attempts, m.max_attempts, m.last_error
      FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
     WHERE m.id = %(id)s::bigint
    UNION ALL
    SELECT 'dead', d.queue, d.channel, d.attempts, d.max_attempts, d.last_error
      FROM lonnymq_dead_message d WHERE d.id = %(id)s::bigint
), p AS (
    SELECT pr.queue, pr.channel, pr.done, pr.total, pr.note, pr.updated_at
      FROM lonnymq_progress pr WHERE pr.message_id = %(id)s::bigint
)
SELECT coalesce(s.state, 'finished') AS state, coalesce(s.queue, p.queue) AS queue,
       coalesce(s.channel, p.channel) AS channel, s.attempts, s.max_attempts, s.last_error,
       p.done, p.total, p.note, p.updated_at
  FROM s FULL JOIN p ON true

-- name: queue_progress
-- The dashboard: the latest progress reports of a queue's running messages, newest first,
-- among its `walk` newest reports (a bounded walk of lonnymq_progress_queue_idx).
SELECT r.message_id, r.channel, r.done, r.total, r.note, r.updated_at
  FROM (SELECT pr.message_id, pr.channel, pr.done, pr.total, pr.note, pr.updated_at
          FROM lonnymq_progress pr
         WHERE pr.queue = %(queue)s::text
         ORDER BY pr.updated_at DESC
         LIMIT %(walk)s::integer) r
 WHERE EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = r.message_id AND m.lease_until IS NOT NULL)
 ORDER BY r.updated_at DESC
 LIMIT %(limit)s::integer

-- name: order_channel
SELECT lonnymq_order_channel_v1(%(queue)s::text, %(channel)s::text, %(ordered)s::boolean)

-- name: unblock_channel
-- Skip the dead message that blocks an ordered channel (api.unblock_channel): its id, or NULL.
SELECT lonnymq_unblock_channel_v1(%(queue)s::text, %(channel)s::text)

-- name: blocked_channels
-- A queue's ordered channels that a dead message blocks, with that message (api.blocked_channels,
-- the admin), by channel name, along lonnymq_channel_blocked_idx.
SELECT c.name, c.blocked_by, d.reason, d.last_error, d.died_at
  FROM lonnymq_channel c
  LEFT JOIN lonnymq_dead_message d ON d.id = c.blocked_by
 WHERE c.queue = %(queue)s::text AND c.blocked_by IS NOT NULL
 ORDER BY c.name
 LIMIT %(limit)s::integer
