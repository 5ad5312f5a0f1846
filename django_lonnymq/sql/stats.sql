-- Named read-only queries of the operator's views (admin, dashboard, lonnymq_stats,
-- metrics). Same format and rules as queries.sql (every argument of a queue function passed,
-- cast to its exact type). Nothing here writes (a test runs each in a READ ONLY
-- transaction): writes go through django_lonnymq.api and queries.sql.

-- name: queue_stats
-- Every queue's figures: exact up to `cap` waiting messages (and dead letters) per queue,
-- estimated past it (the `estimated` column says so; docs/admin.md, "Figures at size").
SELECT * FROM lonnymq_queue_stats_v3(%(queues)s::text[], %(cap)s::bigint)

-- name: channel_counts
SELECT channel_id, ready, scheduled, in_flight FROM lonnymq_channel_counts_v1(%(ids)s::bigint[], %(cap)s::integer)

-- name: estimated_rows
SELECT lonnymq_estimated_rows_v1(%(table)s::regclass)


-- name: live_workers
-- Workers that are live (not stopped, heard from within the lost-after time) per queue they serve.
SELECT q.queue, pg_catalog.count(*) AS live
  FROM lonnymq_worker w CROSS JOIN LATERAL pg_catalog.unnest(w.queues) AS q(queue)
 WHERE w.stopped_at IS NULL
   AND w.heartbeat_at >= pg_catalog.now() - pg_catalog.make_interval(secs => %(lost_after_s)s::double precision)
 GROUP BY q.queue


-- name: table_health
-- Live and dead row versions of the queue's tables and how long ago each was vacuumed
-- (lonnymq_health: vacuum that cannot keep up shows here first).
SELECT relname, n_live_tup, n_dead_tup,
       pg_catalog.date_part('epoch', pg_catalog.now() - GREATEST(last_vacuum, last_autovacuum))::float8 AS vacuumed_ago_s
  FROM pg_catalog.pg_stat_user_tables
 WHERE relname OPERATOR(pg_catalog.=) ANY (%(tables)s::name[]) AND schemaname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
 ORDER BY relname

-- name: horizon_holders
-- What holds this database's xmin horizon back, the oldest horizon first, at most `limit`
-- rows: while one holds it, VACUUM can remove no row version the queue deleted or updated
-- after it, and every dequeue reads more of them (docs/performance.md, "A held snapshot").
-- Sessions of this database (not this one) with a snapshot (backend_xmin) or a transaction
-- id (backend_xid), WAL senders carrying a standby's snapshot (hot_standby_feedback; no
-- database), prepared transactions, replication slots with an xmin. A logical slot's
-- catalog_xmin holds back the system catalogs only, not the queue's tables: not listed.
-- age_s: a session's transaction age (its snapshot is no older), a prepared transaction's
-- age; NULL for a WAL sender or a slot (their xmin carries no time). xid_age: how many
-- transactions back the horizon it holds is. Other roles' sessions show only to a role
-- with pg_read_all_stats (docs/admin.md, "Alarms").
SELECT kind, pid, usename, application_name, state, xact_start, query_start, age_s, xid_age, query, name
  FROM (
    SELECT CASE WHEN a.backend_type OPERATOR(pg_catalog.=) 'walsender' THEN 'wal sender' ELSE 'session' END AS kind,
           a.pid, a.usename::text AS usename, a.application_name, a.state, a.xact_start, a.query_start,
           pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - a.xact_start)::float8 AS age_s,
           GREATEST(pg_catalog.age(a.backend_xmin), pg_catalog.age(a.backend_xid)) AS xid_age,
           pg_catalog.left(a.query, 200) AS query, NULL::text AS name
      FROM pg_catalog.pg_stat_activity a
     WHERE (a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
            OR a.backend_type OPERATOR(pg_catalog.=) 'walsender')
       AND a.backend_type OPERATOR(pg_catalog.<>) 'autovacuum worker'
       AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
       AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
    UNION ALL
    SELECT 'prepared transaction', NULL, p.owner::text, NULL, 'prepared', p.prepared, NULL,
           pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - p.prepared)::float8,
           pg_catalog.age(p.transaction), NULL, p.gid
      FROM pg_catalog.pg_prepared_xacts p
     WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
    UNION ALL
    SELECT 'replication slot', s.active_pid, NULL, NULL,
           CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL, NULL, NULL,
           pg_catalog.age(s.xmin), NULL, s.slot_name::text
      FROM pg_catalog.pg_replication_slots s
     WHERE s.xmin IS NOT NULL
  ) h
 ORDER BY xid_age DESC NULLS LAST, age_s DESC NULLS LAST
 LIMIT %(limit)s::integer

-- name: expired_leases
-- Leases that expired and were not recovered: (older than the grace, all, oldest in ms). The
-- clock is read once (an InitPlan), so the lease index serves the range: the clock function
-- is volatile, and compared row by row it made this a scan of the whole message table.
WITH n AS MATERIALIZED (
    SELECT lonnymq_now_ms_v1() AS v
)
SELECT pg_catalog.count(*) FILTER (WHERE m.lease_until < n.v - %(grace_ms)s::bigint),
       pg_catalog.count(*),
       COALESCE(pg_catalog.max(n.v - m.lease_until), 0::bigint)
  FROM n JOIN lonnymq_message m ON m.lease_until < (SELECT n2.v FROM n n2)

-- name: queue_tenants
-- The dashboard's tenants view: at most `limit` channels of one queue, those whose head
-- message (the first of the ready index) has waited longest first (ready ones, then paused
-- or only scheduled ones, then the idle ones with the most in flight), with their limits,
-- release counters (the row's plus its held-release rows) and counts (capped at `cap`).
-- Cost: one probe of the ready index per candidate channel (its head), then the counts of
-- the rows shown only (docs/admin.md, "The tenants view"). The candidates are every channel
-- of a queue of at most `candidates` channels; past that, the channels a backlog keeps
-- waiting longest (the `candidates` next in turn, the `candidates` at their cap with the
-- earliest turn), the first `limit` paused ones and the `limit` with the most in flight, so
-- the view costs the same at 100,000 channels as at 1,000.
WITH now_ms AS (
    SELECT lonnymq_now_ms_v1() AS v
), candidates AS (
    SELECT c.id FROM lonnymq_channel c
     WHERE c.queue = %(queue)s::text
       AND (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq_channel c2 WHERE c2.queue = %(queue)s::text
                                             LIMIT %(candidates)s::integer + 1) x) <= %(candidates)s::integer
    UNION
    (SELECT c.id FROM lonnymq_channel c
      WHERE c.queue = %(queue)s::text AND c.next_dequeue_at IS NOT NULL AND NOT c.paused
        AND (c.max_concurrency IS NULL OR c.in_flight < c.max_concurrency)
      ORDER BY c.next_dequeue_at LIMIT %(candidates)s::integer)
    UNION
    (SELECT c.id FROM lonnymq_channel c
      WHERE c.queue = %(queue)s::text AND NOT c.paused AND c.in_flight >= c.max_concurrency
      ORDER BY c.next_dequeue_at NULLS LAST LIMIT %(candidates)s::integer)
    UNION
    (SELECT c.id FROM lonnymq_channel c WHERE c.queue = %(queue)s::text AND c.paused
      ORDER BY c.name LIMIT %(limit)s::integer)
    UNION
    (SELECT c.id FROM lonnymq_channel c WHERE c.queue = %(queue)s::text
      ORDER BY c.in_flight DESC, c.name LIMIT %(limit)s::integer)
), heads AS (
    SELECT c.id, c.name, c.paused, c.in_flight, h.dequeue_at AS head_at,
           (h.dequeue_at IS NULL OR h.dequeue_at > now_ms.v OR c.paused) AS not_ready
      FROM candidates k JOIN lonnymq_channel c ON c.id = k.id CROSS JOIN now_ms
      LEFT JOIN LATERAL (
          SELECT m.dequeue_at FROM lonnymq_message m
           WHERE m.channel_id = c.id AND m.lease_until IS NULL
           ORDER BY m.dequeue_at, m.id LIMIT 1
      ) h ON true
), top AS (
    SELECT id, head_at, not_ready FROM heads
     ORDER BY not_ready, head_at NULLS LAST, in_flight DESC, name
     LIMIT %(limit)s::integer
)
SELECT c.id, c.name, c.paused, c.max_concurrency, c.in_flight, c.weight, c.release_interval_ms,
       c.rate_count, c.rate_period_ms, c.rate_burst, c.next_dequeue_at, c.last_dequeue_at,
       c.released_total + COALESCE((SELECT pg_catalog.sum(r.released) FROM lonnymq_release_count r
                                     WHERE r.channel_id = c.id), 0) AS released,
       top.head_at, now_ms.v AS now_ms, n.ready, n.scheduled, c.head_slots
  FROM top JOIN lonnymq_channel c ON c.id = top.id CROSS JOIN now_ms
  LEFT JOIN lonnymq_channel_counts_v1(ARRAY(SELECT id FROM top), %(cap)s::integer) n ON n.channel_id = c.id
 ORDER BY top.not_ready, top.head_at NULLS LAST, c.in_flight DESC, c.name

-- name: workflow_counts
-- Workflows by state (lonnymq_stats, /metrics, the dashboard).
SELECT s.state, (SELECT pg_catalog.count(*) FROM lonnymq_workflow w WHERE w.state = s.state)
  FROM pg_catalog.unnest(ARRAY['running', 'succeeded', 'failed', 'cancelled']::text[]) WITH ORDINALITY AS s(state, n)
 ORDER BY s.n

-- name: queue_health
-- The health command's figures of each queue that has channels, in work that does not grow
-- with the backlog (and reads no sample, unlike queue_stats past its cap): ready messages (due, in a
-- channel that is not paused) and paused ones (waiting in a paused channel) counted exactly
-- up to %(cap)s and given as cap + 1 beyond it (each channel's range of the ready index is
-- read until the queue's count passes the cap); the most overdue ready message (a channel's
-- head is the first entry of its range: one probe per channel); and the database's clock.
WITH now_ms AS MATERIALIZED (
    SELECT lonnymq_now_ms_v1() AS v
), heads AS (
    SELECT c.queue, pg_catalog.min(h.dequeue_at) FILTER (WHERE NOT c.paused) AS head
      FROM lonnymq_channel c
      LEFT JOIN LATERAL (SELECT m.dequeue_at FROM lonnymq_message m
                          WHERE m.channel_id = c.id AND m.lease_until IS NULL
                          ORDER BY m.dequeue_at, m.id LIMIT 1) h ON true
     GROUP BY c.queue
)
SELECT q.queue,
       (SELECT pg_catalog.count(*) FROM (
            SELECT 1 FROM lonnymq_channel c
             CROSS JOIN LATERAL (SELECT 1 FROM lonnymq_message m
                                  WHERE m.channel_id = c.id AND m.lease_until IS NULL AND m.dequeue_at <= n.v
                                  LIMIT %(cap)s::bigint + 1::bigint) r
             WHERE c.queue = q.queue AND NOT c.paused
             LIMIT %(cap)s::bigint + 1::bigint) x) AS ready,
       (SELECT pg_catalog.count(*) FROM (
            SELECT 1 FROM lonnymq_channel c
             CROSS JOIN LATERAL (SELECT 1 FROM lonnymq_message m
                                  WHERE m.channel_id = c.id AND m.lease_until IS NULL
                                  LIMIT %(cap)s::bigint + 1::bigint) r
             WHERE c.queue = q.queue AND c.paused
             LIMIT %(cap)s::bigint + 1::bigint) x) AS paused,
       q.head, n.v AS now_ms
  FROM heads q CROSS JOIN now_ms n
 ORDER BY q.queue
