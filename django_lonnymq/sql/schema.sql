-- django-lonnymq: the live schema. Every table, index and SQL function that a fresh
-- `python manage.py migrate` installs and the app calls, as it is now, in one file.
--
-- This file is the one to read and the one to change (docs/sql.md has the steps): edit a
-- function here, then add a migration that installs the new body. Every function here is
-- called by a named statement of queries.sql or stats.sql, or by another function here.
-- Functions the app no longer calls, still installed for workers of the previous release
-- during a rolling deploy, are in superseded.sql, each with the release that may drop it.
-- The numbered files in sql/migrations/ are frozen history; tests/migrations/test_schema.py
-- proves that migrating from zero gives exactly this schema plus superseded.sql, and pins
-- every released migration file; tests/migrations/test_superseded.py keeps the two files
-- apart.
--
-- Times are BIGINT milliseconds since the Unix epoch. Errors raised here use the SQLSTATE
-- class 'LQ' and are mapped to Python exceptions in django_lonnymq/exceptions.py.
--   LQ001 invalid argument          LQ002 priority with a future run time
--   LQ003 stale lease               LQ004 message not found
--   LQ006 unsupported isolation level
--   LQ170 cancel of a message that does not exist (DETAIL: every such id, comma-separated;
--         the message gives their count and the first 20)
--   LQ260 a plan name that names no plan (worded like LQ001, field plan)
--   LQ261 delete of a plan in use (DETAIL: "channels,queues", how many follow or default to it)
-- The locking argument for these functions is written down in docs/locking.md.
--
-- Bounds, the same numbers as django_lonnymq/bounds.py (CHECK constraints and argument
-- checks), so that no accepted value can overflow the arithmetic of a later dequeue:
--   a time (ms since the epoch)     0 .. 253402300799999 (9999-12-31)
--   a run time or delay ahead       at most 100 years (3155760000000 ms)
--   a release interval, a window    0 .. 366 days (31622400000 ms)
--   a lease, a grace period         1 ms (0 for a grace) .. 1 day (86400000 ms)
--   a payload's depth               at most 100 levels (its deepest value; the root is 0)
--
-- Security: every function runs with a pinned search_path (SET search_path FROM CURRENT,
-- taken from the statement below: the schema the app is installed in, then pg_temp;
-- pg_catalog is searched first), calls built-in functions as pg_catalog.name(...), and
-- writes operators between operands of one type (or as OPERATOR(pg_catalog.op)), so that
-- an object another role creates in a schema on the path can never be picked instead of
-- a built-in (docs/admin.md, "Database privileges").
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

-- ---------------------------------------------------------------------------------------
-- Tables
-- ---------------------------------------------------------------------------------------

-- Plans: named sets of limits (pricing tiers). A channel that follows a plan takes the plan's
-- value for every limit it has not set itself (own_* false); a channel without a plan takes
-- the defaults (weight 1, no cap, no release interval, no rate). The effective values live
-- on the channel row, the columns lonnymq_dequeue_v1 reads, so a dequeue never looks at a
-- plan: lonnymq_configure_plan_v1 writes a plan's change to all its channels in one
-- statement, and lonnymq_check_limits_v2 proves none has drifted.
CREATE TABLE lonnymq_plan (
    id                  bigserial   PRIMARY KEY,
    name                text        NOT NULL,
    weight              integer     NOT NULL DEFAULT 1,
    max_concurrency     integer     NULL,
    release_interval_ms bigint      NOT NULL DEFAULT 0,
    rate_count          integer     NULL,
    rate_period_ms      bigint      NULL,
    rate_burst          integer     NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    -- Strict order for every channel of the plan that does not set it itself (own_ordered):
    -- one message at a time, so an ordered plan's cap is 1 (a NULL cap, unlimited, is not).
    ordered             boolean     NOT NULL DEFAULT false,
    CONSTRAINT lonnymq_plan_ordered_one_at_a_time
        CHECK (NOT ordered OR (max_concurrency IS NOT NULL AND max_concurrency = 1)),
    CONSTRAINT lonnymq_plan_name_uniq UNIQUE (name),
    CONSTRAINT lonnymq_plan_name_length CHECK (char_length(name) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_plan_name_not_blank CHECK (name ~ '\S'),
    CONSTRAINT lonnymq_plan_weight_range CHECK (weight BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_plan_max_concurrency_positive CHECK (max_concurrency IS NULL OR max_concurrency > 0),
    CONSTRAINT lonnymq_plan_release_interval_range CHECK (release_interval_ms BETWEEN 0 AND 31622400000),
    CONSTRAINT lonnymq_plan_rate_complete
        CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL) AND (rate_count IS NULL) = (rate_burst IS NULL)),
    CONSTRAINT lonnymq_plan_rate_count_range CHECK (rate_count BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_plan_rate_period_range CHECK (rate_period_ms BETWEEN 1 AND 31622400000),
    CONSTRAINT lonnymq_plan_rate_burst_range CHECK (rate_burst BETWEEN 1 AND 1000000)
);

-- The plan a queue's new channels follow (configure_queue(default_plan=...)). A table of its
-- own, not lonnymq_queue_config: a queue with a row there has every dequeue lock that row.
CREATE TABLE lonnymq_queue_plan (
    queue      text        PRIMARY KEY,
    plan_id    bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_queue_plan_plan_fk FOREIGN KEY (plan_id) REFERENCES lonnymq_plan (id),
    CONSTRAINT lonnymq_queue_plan_queue_length CHECK (char_length(queue) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_queue_plan_queue_not_blank CHECK (queue ~ '\S')
);
CREATE INDEX lonnymq_queue_plan_plan_idx ON lonnymq_queue_plan (plan_id);

-- Every dequeue that visits a channel rewrites its row (its next turn, its counts), and
-- moves it in the eligible index, so each visit is a new version of the row with a new entry
-- in every index of the table. A unique index then checks each new entry against every
-- version of the row that a held snapshot keeps, one heap block each: 60% of the dequeue's
-- time over 1,000 channels by the fifth cycle of a held snapshot (docs/performance.md). So
-- this table has no unique index: a channel's identity and its uniqueness live in
-- lonnymq_channel_key (below), a row written once, and id, (queue, name) are plain indexes.
CREATE TABLE lonnymq_channel (
    id                  bigserial,
    queue               text        NOT NULL,
    name                text        NOT NULL,
    max_concurrency     integer     NULL,
    release_interval_ms bigint      NOT NULL DEFAULT 0,
    paused              boolean     NOT NULL DEFAULT false,
    in_flight           integer     NOT NULL DEFAULT 0,
    last_dequeue_at     bigint      NULL,
    next_dequeue_at     bigint      NULL,
    turn                bigint      NOT NULL DEFAULT 0,
    released_total      bigint      NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    -- Weighted round robin: under backlog the channel releases `weight` messages per round;
    -- round_used counts the releases of the round it is part-way through.
    weight              integer     NOT NULL DEFAULT 1,
    round_used          integer     NOT NULL DEFAULT 0,
    -- Token bucket: at most rate_burst + rate_count * t / rate_period_ms releases in any
    -- window of t ms (all three NULL: none). bucket_level is the fill right after the last
    -- release (last_dequeue_at), in token x period units (a release costs rate_period_ms of
    -- them, rate_count come back per ms); NULL: full. next_token_at: when the next token is
    -- due, the channel's earliest next turn.
    rate_count          integer     NULL,
    rate_period_ms      bigint      NULL,
    rate_burst          integer     NULL,
    bucket_level        bigint      NULL,
    next_token_at       bigint      NULL,
    CONSTRAINT lonnymq_channel_queue_length CHECK (char_length(queue) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_channel_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_channel_queue_not_blank CHECK (queue ~ '\S'),
    CONSTRAINT lonnymq_channel_name_not_blank CHECK (name ~ '\S'),
    CONSTRAINT lonnymq_channel_max_concurrency_positive
        CHECK (max_concurrency IS NULL OR max_concurrency > 0),
    -- At most 366 days: no release interval can push a channel's next turn out of range.
    CONSTRAINT lonnymq_channel_release_interval_range
        CHECK (release_interval_ms BETWEEN 0 AND 31622400000),
    CONSTRAINT lonnymq_channel_in_flight_nonnegative CHECK (in_flight >= 0),
    CONSTRAINT lonnymq_channel_weight_range CHECK (weight BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_channel_round_used_range CHECK (round_used >= 0 AND round_used < weight),
    CONSTRAINT lonnymq_channel_rate_complete
        CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL) AND (rate_count IS NULL) = (rate_burst IS NULL)),
    CONSTRAINT lonnymq_channel_rate_count_range CHECK (rate_count BETWEEN 1 AND 1000000),
    -- At most 366 days, as a release interval.
    CONSTRAINT lonnymq_channel_rate_period_range CHECK (rate_period_ms BETWEEN 1 AND 31622400000),
    CONSTRAINT lonnymq_channel_rate_burst_range CHECK (rate_burst BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_channel_bucket_level_nonnegative CHECK (bucket_level >= 0),
    -- Plans: the plan the channel follows, and the limits it sets itself (own_*): a plan
    -- gives the others (lonnymq_configure_plan_v1; lonnymq_check_limits_v2 proves it).
    plan_id             bigint      NULL,
    own_weight          boolean     NOT NULL DEFAULT false,
    own_max_concurrency boolean     NOT NULL DEFAULT false,
    own_release_interval boolean    NOT NULL DEFAULT false,
    own_rate            boolean     NOT NULL DEFAULT false,
    CONSTRAINT lonnymq_channel_plan_fk FOREIGN KEY (plan_id) REFERENCES lonnymq_plan (id),
    -- Strict order (configure_channel(ordered=True), lonnymq_order_channel_v1): one message at
    -- a time, in release order. A message of an ordered channel that waits for its retry (or a
    -- snooze) keeps its place at the head and holds the channel until hold_until; a dead one
    -- holds it until it is requeued or skipped (lonnymq_unblock_channel_v1), blocked_by naming
    -- it. Every dequeue reads hold_until (nothing is released before it); it is NULL on every
    -- channel that is not ordered, which is all a queue without ordered channels pays.
    ordered             boolean     NOT NULL DEFAULT false,
    hold_until          bigint      NULL,
    blocked_by          bigint      NULL,
    CONSTRAINT lonnymq_channel_ordered_one_at_a_time CHECK (NOT ordered OR max_concurrency = 1),
    CONSTRAINT lonnymq_channel_hold_range CHECK (hold_until BETWEEN 0 AND 253402300799999),
    CONSTRAINT lonnymq_channel_blocked_is_held CHECK (blocked_by IS NULL OR hold_until IS NOT NULL),
    -- Whether ordered is the channel's own (configure_channel(ordered=...)) or follows its
    -- plan's (false without a plan), as own_* for the limits.
    own_ordered         boolean     NOT NULL DEFAULT false,
    -- The slots (enqueue(slots=k)) its next waiting message takes, as the last dequeue that
    -- visited it saw: a capped channel is eligible while that many are free (at most its cap:
    -- once its cap is free, a message that asks more than a smaller cap still runs).
    head_slots          integer     NOT NULL DEFAULT 1,
    CONSTRAINT lonnymq_channel_head_slots_range CHECK (head_slots BETWEEN 1 AND 1000000),
    -- The last message a dequeue leased from it, (dequeue_at, id): every ready message before
    -- it was taken then. While a held snapshot keeps an entry in the ready index for every
    -- message taken since, a dequeue looks for the channel's candidates after it (not for an
    -- ordered channel), and from the front at least once a second (lonnymq_dequeue_v1).
    taken_at            bigint      NULL,
    taken_id            bigint      NULL
) WITH (
    -- Every release rewrites the row: leave room on the page and vacuum early.
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

-- The scheduler's one index: channels that may release now, in round-robin order.
-- Invariant: a channel holding a ready message is in this index, or paused, or at its cap
-- (no room for the slots of its next message: head_slots).
CREATE INDEX lonnymq_channel_eligible_idx ON lonnymq_channel (queue, next_dequeue_at, turn)
    WHERE next_dequeue_at IS NOT NULL
      AND NOT paused
      AND (max_concurrency IS NULL OR in_flight + least(head_slots, max_concurrency) <= max_concurrency);

-- A channel by id and by name: plain indexes (see above); lonnymq_channel_key holds them unique.
CREATE INDEX lonnymq_channel_id_idx ON lonnymq_channel (id);
CREATE INDEX lonnymq_channel_queue_name_idx ON lonnymq_channel (queue, name);
-- Without a unique index the planner no longer knows that an id names one row: ANALYZE
-- records it (n_distinct -1: every live row's id differs), and until a table has statistics
-- the functions that read channels by id run without JIT (SET jit = off), which a
-- misestimate would otherwise buy: 190 ms of compiling in a bulk enqueue into 2,000 new
-- channels, whose statements take 30.
ALTER TABLE lonnymq_channel ALTER COLUMN id SET (n_distinct = -1);

-- A channel's identity, written once when the channel is created and deleted with it: the
-- unique (queue, name) that decides which of two concurrent first enqueues creates it, the
-- id dead messages keep, and the lookup of a channel by name that an enqueue makes (one row
-- version, however many a held snapshot keeps of the channel's row). The functions that
-- create channels write the key first (ON CONFLICT on its (queue, name)) and then the channel
-- with its id; any other insert into lonnymq_channel gets its key from a trigger
-- (lonnymq_channel_key_v1), and a deleted or truncated channel takes its key with it.
CREATE TABLE lonnymq_channel_key (
    id     bigint NOT NULL DEFAULT pg_catalog.nextval('lonnymq_channel_id_seq'::regclass) PRIMARY KEY,
    queue  text   NOT NULL,
    name   text   NOT NULL,
    CONSTRAINT lonnymq_channel_key_queue_name_uniq UNIQUE (queue, name)
);

-- Ordered channels a dead message blocks, by queue (api.blocked_channels, the admin).
CREATE INDEX lonnymq_channel_blocked_idx ON lonnymq_channel (queue, name) WHERE blocked_by IS NOT NULL;

-- A plan's channels, in the order a plan change locks them.
CREATE INDEX lonnymq_channel_plan_idx ON lonnymq_channel (plan_id, id) WHERE plan_id IS NOT NULL;

CREATE SEQUENCE lonnymq_turn_seq;

CREATE TABLE lonnymq_message (
    id            bigserial   PRIMARY KEY,
    -- Its channel's row (lonnymq_channel.id). No foreign key: its check on a channel's delete
    -- needed an index of every message by channel, which every insert and every lease paid
    -- for. Every function that writes a new message holds its channel against a delete
    -- (lonnymq_hold_channels_v1, docs/locking.md "Pruning a channel"), the deletes re-test
    -- emptiness themselves, and lonnymq_check_v2 reports a message whose channel is gone.
    channel_id    bigint      NOT NULL,
    payload       jsonb       NOT NULL,
    dequeue_at    bigint      NOT NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    attempts      integer     NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL,
    lease_until   bigint      NULL,
    lease_token   uuid        NULL,
    leased_by     text        NULL,
    slot_taken    boolean     NOT NULL DEFAULT false,
    dedup_key     text        NULL,
    enqueued_at   timestamptz NOT NULL DEFAULT now(),
    last_error    text        NULL,
    -- Someone asked to cancel the message while it ran: its worker learns it at the next
    -- heartbeat (lonnymq_extend_v2), and the message ends dead with reason 'cancelled'.
    -- Only a leased message carries it (anything that gives the lease back buries it).
    cancel_requested boolean  NOT NULL DEFAULT false,
    -- The lease took a slot of its queue's concurrency cap (lonnymq_queue_config).
    queue_slot    boolean     NOT NULL DEFAULT false,
    -- Times a handler put the message back with Snooze (lonnymq_snooze_v1): no attempt spent.
    snoozes       integer     NOT NULL DEFAULT 0,
    -- Tokens of its channel's (and its queue's) token bucket a release takes (enqueue(cost=k)).
    cost          integer     NOT NULL DEFAULT 1,
    -- Units of its channel's (and its queue's) concurrency cap a lease takes (enqueue(slots=k)).
    slots         integer     NOT NULL DEFAULT 1,
    CONSTRAINT lonnymq_message_attempts_nonnegative CHECK (attempts >= 0),
    CONSTRAINT lonnymq_message_cost_range CHECK (cost BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_message_slots_range CHECK (slots BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_message_snoozes_nonnegative CHECK (snoozes >= 0),
    -- 1970-01-01 to 9999-12-31: every release time is a date Python and the admin can show.
    CONSTRAINT lonnymq_message_dequeue_at_range CHECK (dequeue_at BETWEEN 0 AND 253402300799999),
    CONSTRAINT lonnymq_message_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_message_priority_range CHECK (priority BETWEEN 0 AND 100),
    CONSTRAINT lonnymq_message_lease_complete CHECK ((lease_until IS NULL) = (lease_token IS NULL)),
    CONSTRAINT lonnymq_message_slot_needs_lease CHECK (NOT slot_taken OR lease_until IS NOT NULL),
    CONSTRAINT lonnymq_message_dedup_key_length
        CHECK (dedup_key IS NULL OR char_length(dedup_key) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_message_payload_size CHECK (pg_column_size(payload) <= 8388608),
    CONSTRAINT lonnymq_message_queue_slot_needs_lease CHECK (NOT queue_slot OR lease_until IS NOT NULL)
) WITH (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- Ready and scheduled messages of a channel, in release order (FIFO, priority, schedule).
CREATE INDEX lonnymq_message_ready_idx ON lonnymq_message (channel_id, dequeue_at, id)
    WHERE lease_until IS NULL;
-- Messages in flight, by lease expiry: drives the reaper.
CREATE INDEX lonnymq_message_lease_idx ON lonnymq_message (lease_until)
    WHERE lease_until IS NOT NULL;
-- Every message is in one of the two: whether a channel holds any message is a probe of the
-- ready index and a look along the lease index (what a prune and delete_channel test).

-- Dedup keys outlive their messages for a window, so a re-run producer enqueues nothing twice.
CREATE TABLE lonnymq_dedup (
    channel_id  bigint      NOT NULL,
    dedup_key   text        NOT NULL,
    message_id  bigint      NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel_id, dedup_key)
);
CREATE INDEX lonnymq_dedup_created_idx ON lonnymq_dedup (created_at);

-- Wake-up marks: "this channel has work from this time on". A producer whose channel is parked
-- (or whose next turn is too late) leaves a mark instead of updating the channel row, so it
-- never holds a row lock that another producer or a dequeuer would wait for. The mark commits
-- or rolls back with the messages; the next dequeue of the queue applies committed marks to
-- the channel rows and deletes them. One mark per channel and producer transaction.
CREATE TABLE lonnymq_wake (
    id          bigserial PRIMARY KEY,
    queue       text   NOT NULL,
    channel_id  bigint NOT NULL,
    dequeue_at  bigint NOT NULL,
    xact        xid8   NOT NULL DEFAULT pg_current_xact_id()
) WITH (
    -- Inserted and deleted all day, usually nearly empty: vacuum early.
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_insert_threshold = 500,
    autovacuum_vacuum_cost_delay = 0
);
CREATE UNIQUE INDEX lonnymq_wake_channel_xact_uniq ON lonnymq_wake (channel_id, xact);
CREATE INDEX lonnymq_wake_queue_idx ON lonnymq_wake (queue, dequeue_at);

-- Releases counted away from the channel row: a dequeue that leases messages of a channel
-- another dequeuer holds (lonnymq_dequeue_held_v1) cannot add them to the row's
-- released_total without waiting for that dequeuer. It adds them here instead, to its own
-- row (one per channel and server backend, so no two running transactions write the same
-- row); the reaper folds the rows of backends that are gone into released_total. A channel's
-- count is released_total plus its rows here.
CREATE TABLE lonnymq_release_count (
    channel_id  bigint  NOT NULL,
    backend     integer NOT NULL,
    released    bigint  NOT NULL,
    PRIMARY KEY (channel_id, backend)
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TABLE lonnymq_dead_message (
    id            bigint      PRIMARY KEY,
    channel_id    bigint      NULL REFERENCES lonnymq_channel_key (id) ON DELETE SET NULL,
    queue         text        NOT NULL,
    channel       text        NOT NULL,
    payload       jsonb       NOT NULL,
    priority      smallint    NOT NULL DEFAULT 0,
    attempts      integer     NOT NULL,
    max_attempts  integer     NOT NULL,
    dedup_key     text        NULL,
    enqueued_at   timestamptz NOT NULL,
    died_at       timestamptz NOT NULL DEFAULT now(),
    reason        text        NOT NULL,
    last_error    text        NULL,
    snoozes       integer     NOT NULL DEFAULT 0,
    cost          integer     NOT NULL DEFAULT 1,
    slots         integer     NOT NULL DEFAULT 1,
    CONSTRAINT lonnymq_dead_message_snoozes_nonnegative CHECK (snoozes >= 0),
    CONSTRAINT lonnymq_dead_message_cost_range CHECK (cost BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_dead_message_slots_range CHECK (slots BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_dead_message_reason_known
        CHECK (reason IN ('failed', 'discarded', 'lease_expired', 'timeout', 'cancelled'))
);
CREATE INDEX lonnymq_dead_queue_died_idx ON lonnymq_dead_message (queue, died_at);
CREATE INDEX lonnymq_dead_channel_idx ON lonnymq_dead_message (channel_id);
-- The admin's dead-letter list: newest first (unfiltered, or by reason), and by queue and
-- channel; each page is a walk of an index that stops at the page's end.
CREATE INDEX lonnymq_dead_died_idx ON lonnymq_dead_message (died_at);
CREATE INDEX lonnymq_dead_queue_channel_idx ON lonnymq_dead_message (queue, channel, died_at);

-- Queue-wide limits, across all workers and channels of a queue: a concurrency cap and a
-- token bucket. Only queues with a row pay for them: a dequeue of such a queue locks its row
-- (the only row every dequeuer of the queue shares), a lease that took a slot is flagged
-- (lonnymq_message.queue_slot), and only flagged leases give a slot back. A queue without
-- a row costs one index probe per dequeue and nothing per ack. A paused queue
-- (lonnymq_pause_queue_v1) releases nothing. At least one limit is set, or the pause:
-- configure_queue and resuming delete the row when nothing is left.
CREATE TABLE lonnymq_queue_config (
    queue            text        PRIMARY KEY,
    max_concurrency  integer     NULL,
    rate_count       integer     NULL,
    rate_period_ms   bigint      NULL,
    rate_burst       integer     NULL,
    -- Leases of the queue that took a slot (kept only while max_concurrency is set).
    in_flight        integer     NOT NULL DEFAULT 0,
    -- The bucket's fill right after the last release, in token x period units; NULL: full.
    bucket_level     bigint      NULL,
    last_release_at  bigint      NULL,
    next_token_at    bigint      NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- Paused: its dequeues release nothing (api.pause_queue / resume_queue).
    paused           boolean     NOT NULL DEFAULT false,
    -- The slots of the first message the last dequeue left out for want of the queue's free
    -- slots (1 otherwise): idle workers wait until that many are free (at most the cap).
    head_slots       integer     NOT NULL DEFAULT 1,
    CONSTRAINT lonnymq_queue_config_head_slots_range CHECK (head_slots BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_queue_config_queue_length CHECK (char_length(queue) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_queue_config_queue_not_blank CHECK (queue ~ '\S'),
    CONSTRAINT lonnymq_queue_config_max_concurrency_positive
        CHECK (max_concurrency IS NULL OR max_concurrency > 0),
    CONSTRAINT lonnymq_queue_config_rate_complete
        CHECK ((rate_count IS NULL) = (rate_period_ms IS NULL) AND (rate_count IS NULL) = (rate_burst IS NULL)),
    CONSTRAINT lonnymq_queue_config_rate_count_range CHECK (rate_count BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_queue_config_rate_period_range CHECK (rate_period_ms BETWEEN 1 AND 31622400000),
    CONSTRAINT lonnymq_queue_config_rate_burst_range CHECK (rate_burst BETWEEN 1 AND 1000000),
    CONSTRAINT lonnymq_queue_config_has_a_limit
        CHECK (max_concurrency IS NOT NULL OR rate_count IS NOT NULL OR paused),
    CONSTRAINT lonnymq_queue_config_in_flight_nonnegative CHECK (in_flight >= 0),
    CONSTRAINT lonnymq_queue_config_bucket_level_nonnegative CHECK (bucket_level >= 0)
);

-- Releases of channels that were pruned (lonnymq_prune_channels_v1), per queue: a queue's
-- released_total (lonnymq_queue_stats_v3) adds this row, so pruning never makes it fall.
CREATE TABLE lonnymq_queue_released (
    queue     text   PRIMARY KEY,
    released  bigint NOT NULL,
    CONSTRAINT lonnymq_queue_released_nonnegative CHECK (released >= 0)
);

-- Where the dequeues of a queue start their scans of the eligible index while a held
-- snapshot fills its front with the versions of every channel row written since (the mark of
-- lonnymq_dequeue_v1, shared by the queue's sessions): the time of the next scan from the
-- front and the mark the last one found. Written at most once per scan from the front that
-- read many entries, by the session holding the queue's advisory lock
-- (lonnymq_mark_lock_ns_v1); deleted when such a scan reads few again. Read only by a session
-- that has a mark, so never while nothing holds the horizon back.
CREATE TABLE lonnymq_eligible_mark (
    queue     text   PRIMARY KEY,
    front_at  bigint NOT NULL,
    mark      bigint NOT NULL
);

-- The same for the ready index (lonnymq_ready_from_v1): until when the candidate scans of a
-- queue's dequeues start after the last message taken from each channel, written by the
-- session holding the queue's advisory lock (lonnymq_ready_lock_ns_v1) after its scan from the
-- front, deleted when such a scan reads few entries again.
CREATE TABLE lonnymq_ready_mark (
    queue  text   PRIMARY KEY,
    until  bigint NOT NULL
);

-- Dashboard history: one row per queue each time someone records a sample.
-- Written by `manage.py lonnymq_stats --record` (cron, or --interval), pruned by the same
-- call. The dashboard charts these; it never writes them itself.
CREATE TABLE lonnymq_queue_sample (
    id               bigserial   PRIMARY KEY,
    queue            text        NOT NULL,
    at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    channels         bigint      NOT NULL,
    paused_channels  bigint      NOT NULL,
    ready            bigint      NOT NULL,
    scheduled        bigint      NOT NULL,
    in_flight        bigint      NOT NULL,
    dead             bigint      NOT NULL,
    -- How long the most overdue ready message has been due (ms); NULL when none is ready.
    oldest_ready_ms  bigint      NULL,
    -- sum(lonnymq_channel.released_total) of the queue's channels: messages released
    -- (leased) ever, once per delivery. Monotonic per channel; the sum drops only when a
    -- channel is deleted (its count leaves the sum), so readers clamp differences at 0.
    released_total   bigint      NOT NULL DEFAULT 0,
    -- Messages waiting (not leased) in paused channels: never counted as ready or
    -- scheduled (lonnymq_queue_stats_v2, _v3). 0 in samples recorded through _v1.
    paused           bigint      NOT NULL DEFAULT 0,
    CONSTRAINT lonnymq_queue_sample_counts_nonnegative
        CHECK (channels >= 0 AND paused_channels >= 0 AND ready >= 0 AND scheduled >= 0
               AND in_flight >= 0 AND dead >= 0 AND released_total >= 0),
    CONSTRAINT lonnymq_queue_sample_paused_nonnegative CHECK (paused >= 0)
);
CREATE INDEX lonnymq_sample_queue_at_idx ON lonnymq_queue_sample (queue, at);
CREATE INDEX lonnymq_queue_sample_at_idx ON lonnymq_queue_sample (at);

-- Trace context of messages enqueued inside a recording OpenTelemetry span
-- (django_lonnymq.tracing): written by the producer in its own transaction, read by the
-- worker that leases the message, so the handler's span is a child of the enqueue span.
-- Nothing is written while tracing is off. No foreign key, so acks and deletes of messages
-- pay nothing: workers drop rows whose message is gone (lonnymq_trace_created_idx).
CREATE TABLE lonnymq_trace (
    message_id  bigint      PRIMARY KEY,
    context     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_trace_context_size CHECK (pg_catalog.octet_length(context::text) <= 4096)
);
CREATE INDEX lonnymq_trace_created_idx ON lonnymq_trace (created_at);

-- Results of Django Tasks run on the queue (django_lonnymq.tasks).
-- Kept apart from the queue's hot tables: one insert at enqueue, two updates per run.
CREATE TABLE lonnymq_task_result (
    id                 text        PRIMARY KEY,
    backend            text        NOT NULL,
    task_path          text        NOT NULL,
    queue              text        NOT NULL,
    channel            text        NOT NULL,
    message_id         bigint      NULL,
    status             text        NOT NULL,
    args               jsonb       NOT NULL DEFAULT '[]',
    kwargs             jsonb       NOT NULL DEFAULT '{}',
    priority           integer     NOT NULL DEFAULT 0,
    run_after          timestamptz NULL,
    return_value       jsonb       NULL,
    errors             jsonb       NOT NULL DEFAULT '[]',
    worker_ids         jsonb       NOT NULL DEFAULT '[]',
    enqueued_at        timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz NULL,
    last_attempted_at  timestamptz NULL,
    finished_at        timestamptz NULL,
    CONSTRAINT lonnymq_task_result_status_known
        CHECK (status IN ('READY', 'RUNNING', 'FAILED', 'SUCCESSFUL'))
) WITH (fillfactor = 80);
CREATE INDEX lonnymq_task_finished_idx ON lonnymq_task_result (finished_at)
    WHERE finished_at IS NOT NULL;
-- The result of a message (lonnymq_enqueue_task_keyed_v1: the key's message's result).
CREATE INDEX lonnymq_task_message_idx ON lonnymq_task_result (message_id);

-- Periodic schedules (django_lonnymq.schedules): declared in code with @periodic (synced when
-- a worker starts; `declared` holds what the code said) or added in the admin (`declared`
-- NULL). A worker serving the queue claims a due row FOR UPDATE SKIP LOCKED, enqueues its
-- tick with a dedup key made of the schedule and the tick, and writes the next tick in the
-- same transaction: each tick is enqueued once. next_tick_at NULL: no tick until the
-- schedule is saved again (its timing could not be computed: see last_error).
CREATE TABLE lonnymq_schedule (
    id               bigserial   PRIMARY KEY,
    name             text        NOT NULL,
    queue            text        NOT NULL,
    channel          text        NOT NULL DEFAULT 'default',
    cron             text        NULL,
    every_ms         bigint      NULL,
    timezone         text        NOT NULL DEFAULT 'UTC',
    payload          jsonb       NOT NULL DEFAULT '{}',
    catch_up         integer     NOT NULL DEFAULT 1,
    max_attempts     integer     NULL,
    enabled          boolean     NOT NULL DEFAULT true,
    next_tick_at     bigint      NULL,
    last_tick_at     bigint      NULL,
    last_message_id  bigint      NULL,
    declared         jsonb       NULL,
    last_error       text        NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_schedule_name_uniq UNIQUE (name),
    CONSTRAINT lonnymq_schedule_name_length CHECK (char_length(name) BETWEEN 1 AND 200 AND name ~ '\S'),
    CONSTRAINT lonnymq_schedule_queue_length CHECK (char_length(queue) BETWEEN 1 AND 100 AND queue ~ '\S'),
    CONSTRAINT lonnymq_schedule_channel_length
        CHECK (char_length(channel) BETWEEN 1 AND 200 AND channel ~ '\S'),
    -- A cron expression or a fixed interval (at least 1 s, at most 366 days), never both.
    CONSTRAINT lonnymq_schedule_one_timing CHECK ((cron IS NULL) <> (every_ms IS NULL)),
    CONSTRAINT lonnymq_schedule_cron_length CHECK (cron IS NULL OR char_length(cron) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_schedule_every_range CHECK (every_ms IS NULL OR every_ms BETWEEN 1000 AND 31622400000),
    CONSTRAINT lonnymq_schedule_timezone_length CHECK (char_length(timezone) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_schedule_catch_up_range CHECK (catch_up BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_schedule_max_attempts_range
        CHECK (max_attempts IS NULL OR max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_schedule_next_tick_range
        CHECK (next_tick_at IS NULL OR next_tick_at BETWEEN 0 AND 253402300799999),
    CONSTRAINT lonnymq_schedule_payload_size CHECK (pg_column_size(payload) <= 8388608),
    -- No value deeper than level 100 (the root is level 0), as lonnymq_enqueue_v3 refuses.
    -- Not on lonnymq_message: a CHECK there would run at every lease update.
    CONSTRAINT lonnymq_schedule_payload_depth CHECK (NOT jsonb_path_exists(payload, 'strict $.**{101}'))
) WITH (
    -- Every tick rewrites the row (next_tick_at is indexed, so never HOT).
    fillfactor = 70
);
-- Workers find due schedules of their queues with one probe of this index.
CREATE INDEX lonnymq_schedule_due_idx ON lonnymq_schedule (queue, next_tick_at) WHERE enabled;

-- ---------------------------------------------------------------------------------------
-- Small helpers
-- ---------------------------------------------------------------------------------------

CREATE FUNCTION lonnymq_now_ms_v1() RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000::numeric)::bigint
$$;

-- Advisory lock key of a channel: (namespace, channel). The fixed namespace keeps these
-- locks apart from the application's own one-key advisory locks.
CREATE FUNCTION lonnymq_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135473 $$;

-- A second namespace, for leases taken without the channel row (lonnymq_dequeue_held_v1):
-- such a dequeue holds it shared; a change of the channel's limits waits for it exclusively.
CREATE FUNCTION lonnymq_lease_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135474 $$;

CREATE FUNCTION lonnymq_lock_key_v1(p_channel_id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT (p_channel_id % 2147483647::bigint)::integer $$;

-- A third namespace, for channel stripes: a producer writing into more than 64 channels at
-- once holds a shared lock per stripe (lonnymq_stripe_key_v1: the channel id modulo 1024)
-- instead of one per channel, so it takes at most 1,024 slots of the server's lock table,
-- which all sessions share (docs/locking.md, "Stripes"). Whoever parks or deletes a channel
-- tries both exclusive locks, its own and its stripe's.
CREATE FUNCTION lonnymq_stripe_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135475 $$;

CREATE FUNCTION lonnymq_stripe_key_v1(p_channel_id bigint) RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT (p_channel_id % 1024::bigint)::integer $$;

-- A fifth namespace, for a queue's shared eligible mark (lonnymq_eligible_mark): the one
-- dequeuer that holds it (keyed by the queue name's hashtext) scans from the front and writes.
CREATE FUNCTION lonnymq_mark_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135477 $$;

-- A sixth, for the time until which a queue's candidate scans start after the taken
-- (lonnymq_ready_mark): the one dequeuer that holds it scans from the front and writes.
CREATE FUNCTION lonnymq_ready_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135478 $$;

-- A producer's shared advisory locks, held until its transaction ends, so that no dequeuer
-- parks a channel it is about to write ready work into: one per channel for the first 64
-- channels a transaction writes into, one per stripe after that (see
-- lonnymq_stripe_lock_ns_v1), so a transaction holds at most 64 + 1,024 of the lock table's
-- slots however many channels it writes into, in one call or in thousands. The count of
-- channel locks lives in a transaction-local setting, lonnymq.channel_locks (a savepoint's
-- rollback takes back its locks and its count alike).
CREATE FUNCTION lonnymq_lock_channel_v1(p_channel_id bigint) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_held integer := coalesce(NULLIF(pg_catalog.current_setting('lonnymq.channel_locks', true), ''), '0')::integer;
BEGIN
    IF v_held < 64 THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(p_channel_id));
        PERFORM pg_catalog.set_config('lonnymq.channel_locks', (v_held + 1)::text, true);
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_stripe_lock_ns_v1(), lonnymq_stripe_key_v1(p_channel_id));
    END IF;
END
$$;

-- The same for the channels of one call, in one order (by channel id, or by stripe): one lock
-- per channel while the transaction's channel locks stay within 64, else one per stripe.
CREATE FUNCTION lonnymq_lock_channels_v1(p_channel_ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_held integer := coalesce(NULLIF(pg_catalog.current_setting('lonnymq.channel_locks', true), ''), '0')::integer;
    v_ids  bigint[];
BEGIN
    SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_ids
      FROM pg_catalog.unnest(p_channel_ids) AS u(id) WHERE u.id IS NOT NULL;
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    IF v_held + pg_catalog.cardinality(v_ids) <= 64 THEN
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(f.id))
           FROM pg_catalog.unnest(v_ids) WITH ORDINALITY AS f(id, i) ORDER BY f.i;
        PERFORM pg_catalog.set_config('lonnymq.channel_locks', (v_held + pg_catalog.cardinality(v_ids))::text, true);
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_stripe_lock_ns_v1(), f.stripe)
           FROM (SELECT DISTINCT lonnymq_stripe_key_v1(u.id) AS stripe
                   FROM pg_catalog.unnest(v_ids) AS u(id)) f ORDER BY f.stripe;
    END IF;
END
$$;

CREATE FUNCTION lonnymq_raise_invalid_v1(p_field text, p_rule text, p_value text)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION '% %, got %', p_field, p_rule, coalesce(p_value, 'null')
        USING ERRCODE = 'LQ001', COLUMN = p_field;
END
$$;

-- A number outside [p_min, p_max] (or NULL where none is allowed) is refused as LQ001.
-- Every duration and time a caller passes goes through here, so none can overflow later.
CREATE FUNCTION lonnymq_check_range_v1(p_field text, p_value bigint, p_min bigint, p_max bigint,
                                       p_null_ok boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_value IS NULL THEN
        IF NOT p_null_ok THEN
            PERFORM lonnymq_raise_invalid_v1(p_field, 'must not be null', NULL::text);
        END IF;
    ELSIF p_value < p_min OR p_value > p_max THEN
        PERFORM lonnymq_raise_invalid_v1(p_field, pg_catalog.format('must be between %s and %s', p_min, p_max),
                                         p_value::text);
    END IF;
END
$$;

-- An array argument must be a plain list: PostgreSQL would flatten a 2-D array silently.
CREATE FUNCTION lonnymq_check_list_v1(p_field text, p_ndims integer) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ndims > 1 THEN
        PERFORM lonnymq_raise_invalid_v1(p_field, 'must be a one-dimensional array', pg_catalog.format('%s dimensions', p_ndims));
    END IF;
END
$$;

-- Queue and channel names: 1 to 100 (200) characters, not only blanks.
CREATE FUNCTION lonnymq_check_names_v1(p_queue text, p_channel text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_channel IS NULL OR pg_catalog.char_length(p_channel) NOT BETWEEN 1 AND 200 OR p_channel !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('channel', 'must be 1 to 200 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_channel));
    END IF;
END
$$;

-- A payload nested deeper than 100 levels (bounds.MAX_PAYLOAD_DEPTH: the level of its
-- deepest value, the root being level 0) is refused as LQ001, naming its depth: a worker
-- decodes it with Python's json, which stops near 1,000 levels. The callers test
-- jsonb_path_exists(payload, 'strict $.**{101}') (a value at level 101) and call this only
-- to raise; it finds the depth by doubling, then halving, the level it asks for.
CREATE FUNCTION lonnymq_raise_too_deep_v1(p_field text, p_payload jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_low  integer := 101;  -- a value is at this level
    v_high integer := 202;  -- none is at this level (once the first loop ends)
    v_mid  integer;
BEGIN
    WHILE pg_catalog.jsonb_path_exists(p_payload, pg_catalog.format('strict $.**{%s}', v_high)::jsonpath) LOOP
        v_low := v_high;
        v_high := v_high * 2;
    END LOOP;
    WHILE v_high - v_low > 1 LOOP
        v_mid := (v_low + v_high) / 2;
        IF pg_catalog.jsonb_path_exists(p_payload, pg_catalog.format('strict $.**{%s}', v_mid)::jsonpath) THEN
            v_low := v_mid;
        ELSE
            v_high := v_mid;
        END IF;
    END LOOP;
    PERFORM lonnymq_raise_invalid_v1(p_field, 'must be nested at most 100 levels deep (the root is level 0)'::text,
                                     pg_catalog.format('%s levels', v_low));
END
$$;

-- When a new message may first be released: a run time or delay, or now minus the priority
-- credit. Priority with a future run time is refused: the two cannot be folded together.
CREATE FUNCTION lonnymq_dequeue_at_v1(
    p_now bigint, p_run_at_ms bigint, p_delay_ms bigint, p_priority integer, p_priority_step_ms bigint
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_at bigint;
BEGIN
    IF p_priority IS NULL OR p_priority NOT BETWEEN 0 AND 100 THEN
        PERFORM lonnymq_raise_invalid_v1('priority', 'must be between 0 and 100', p_priority::text);
    END IF;
    -- At most 100 years ahead, and no run time before 1970: dequeue_at stays a valid time.
    -- (Tested inline first: this runs on every enqueue, and each call of a function with a
    -- pinned search_path costs a few microseconds.)
    IF p_delay_ms NOT BETWEEN 0 AND 3155760000000 OR p_run_at_ms NOT BETWEEN 0 AND p_now + 3155760000000
       OR p_priority_step_ms IS NULL OR p_priority_step_ms NOT BETWEEN 0 AND 86400000 THEN
        PERFORM lonnymq_check_range_v1('delay', p_delay_ms, 0::bigint, 3155760000000::bigint, true);
        PERFORM lonnymq_check_range_v1('run_at', p_run_at_ms, 0::bigint, p_now + 3155760000000::bigint, true);
        PERFORM lonnymq_check_range_v1('priority_step', p_priority_step_ms, 0::bigint, 86400000::bigint, false);
    END IF;
    IF p_run_at_ms IS NOT NULL AND p_delay_ms IS NOT NULL THEN
        PERFORM lonnymq_raise_invalid_v1('run_at', 'cannot be combined with delay', p_run_at_ms::text);
    END IF;
    v_at := coalesce(p_run_at_ms, p_now + coalesce(p_delay_ms, 0));
    IF p_priority > 0 THEN
        IF v_at > p_now THEN
            RAISE EXCEPTION 'priority % cannot be combined with a future run time (% ms from now)',
                p_priority, v_at - p_now
                USING ERRCODE = 'LQ002', COLUMN = 'priority',
                      HINT = 'Priority moves a message earlier; a scheduled message has no earlier slot to move to.';
        END IF;
        v_at := greatest(v_at - p_priority::bigint * p_priority_step_ms, 0::bigint);
    END IF;
    RETURN v_at;
END
$$;

-- Get or create a channel, race-free: concurrent first enqueues agree on one row.
CREATE FUNCTION lonnymq_channel_id_v1(p_queue text, p_channel text) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_id bigint;
BEGIN
    SELECT k.id INTO v_id FROM lonnymq_channel_key k WHERE k.queue = p_queue AND k.name = p_channel;
    IF v_id IS NULL THEN
        PERFORM lonnymq_check_names_v1(p_queue, p_channel);
        -- The key first: of two concurrent first enqueues, the one whose key goes in creates it.
        INSERT INTO lonnymq_channel_key (queue, name) VALUES (p_queue, p_channel)
            ON CONFLICT (queue, name) DO NOTHING
            RETURNING id INTO v_id;
        IF v_id IS NOT NULL THEN
            PERFORM pg_catalog.set_config('lonnymq.channel_keys', 'written', true);
            INSERT INTO lonnymq_channel (id, queue, name) VALUES (v_id, p_queue, p_channel);
            PERFORM pg_catalog.set_config('lonnymq.channel_keys', '', true);
        ELSE
            SELECT k.id INTO v_id FROM lonnymq_channel_key k WHERE k.queue = p_queue AND k.name = p_channel;
        END IF;
        IF v_id IS NULL THEN
            RAISE EXCEPTION 'channel %/% was created concurrently; retry the transaction', p_queue, p_channel
                USING ERRCODE = '40001';
        END IF;
    END IF;
    RETURN v_id;
END
$$;

-- Make sure a channel will look at a message that becomes ready at p_dequeue_at (no earlier
-- than its release interval, its next token and an ordered channel's hold allow: this floor
-- is the same in lonnymq_mark_v1, lonnymq_mark_many_v1 and lonnymq_apply_marks_v1).
-- Lowers next_dequeue_at only when it must (more than p_tolerance_ms later than needed), so
-- enqueues into a busy channel take no row lock. The caller holds the channel's shared
-- advisory lock (see docs/locking.md). Under REPEATABLE READ or SERIALIZABLE the lowering is
-- unconditional: the row lock then keeps dequeuers from parking the channel until commit.
CREATE FUNCTION lonnymq_wake_v1(p_channel_id bigint, p_dequeue_at bigint, p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        UPDATE lonnymq_channel c
           SET next_dequeue_at = greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until),
               turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
         WHERE c.id = p_channel_id
           AND (c.next_dequeue_at IS NULL
                OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until)
                                       + p_tolerance_ms);
    ELSE
        UPDATE lonnymq_channel c
           SET next_dequeue_at = least(
                   coalesce(c.next_dequeue_at, 9223372036854775807),
                   greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until)),
               turn = CASE WHEN c.next_dequeue_at IS NULL
                             OR c.next_dequeue_at > greatest(p_dequeue_at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until)
                           THEN pg_catalog.nextval('lonnymq_turn_seq') * 100000 ELSE c.turn END
         WHERE c.id = p_channel_id;
    END IF;
    RETURN FOUND;
END
$$;

-- A producer's wake-up: leave a mark for a channel whose next turn is not early enough for a
-- message due at p_dequeue_at. Takes no row lock: the mark becomes visible when the producer
-- commits and the next dequeue applies it. The caller holds the channel's shared advisory
-- lock, so no dequeuer parks it meanwhile (docs/locking.md). Under READ COMMITTED a mark
-- already there and early enough (committed, or this transaction's own) will do: only a
-- dequeue that applies it deletes it. So enqueues into a channel no worker has visited yet
-- leave one mark, not one per transaction. Under REPEATABLE READ or SERIALIZABLE the
-- producer's snapshot may predate a park: it always marks. Notifies the queue's workers
-- (delivered at commit) when it marked. Scalar statements on purpose: their generic plans
-- are index probes, so plpgsql does not re-plan them on every call.
CREATE FUNCTION lonnymq_mark_v1(p_queue text, p_channel_id bigint, p_dequeue_at bigint,
                                           p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_next  bigint;
    v_floor bigint;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        SELECT c.next_dequeue_at, greatest(c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until) INTO v_next, v_floor
          FROM lonnymq_channel c WHERE c.id = p_channel_id;
        IF v_next IS NOT NULL AND v_next <= greatest(p_dequeue_at, v_floor) + p_tolerance_ms THEN
            RETURN false;
        END IF;
        PERFORM FROM lonnymq_wake w
          WHERE w.channel_id = p_channel_id AND w.dequeue_at <= p_dequeue_at + p_tolerance_ms;
        IF FOUND THEN
            RETURN false;
        END IF;
    END IF;
    -- A later message of the same transaction rewrites its mark only when it is due earlier
    -- (a rewrite on every call would pile up row versions inside one long transaction).
    INSERT INTO lonnymq_wake AS w (queue, channel_id, dequeue_at)
    VALUES (p_queue, p_channel_id, p_dequeue_at)
    ON CONFLICT (channel_id, xact) DO UPDATE SET dequeue_at = excluded.dequeue_at
        WHERE excluded.dequeue_at < w.dequeue_at;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    RETURN true;
END
$$;

-- The same for many channels (distinct ids, each with the earliest time it needs), in one
-- statement: enqueue_many's wake-up. Under READ COMMITTED a channel that already has a
-- committed mark early enough needs no other: the next dequeue applies that mark, and while
-- this transaction holds the channel's shared advisory lock no dequeuer parks the channel
-- (docs/locking.md). So a producer that writes chunk after chunk into channels no worker has
-- looked at yet leaves one mark per channel, not one per chunk.
CREATE FUNCTION lonnymq_mark_many_v1(p_queue text, p_channel_ids bigint[], p_dequeue_ats bigint[],
                                     p_tolerance_ms bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_marked integer;
BEGIN
    INSERT INTO lonnymq_wake AS w (queue, channel_id, dequeue_at)
    SELECT p_queue, c.id, u.at
      FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, at)
      JOIN lonnymq_channel c ON c.id = u.id AND c.id = ANY (p_channel_ids)
     WHERE pg_catalog.current_setting('transaction_isolation') <> 'read committed'
        OR ((c.next_dequeue_at IS NULL
             OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until) + p_tolerance_ms)
            AND NOT EXISTS (SELECT 1 FROM lonnymq_wake m
                             WHERE m.channel_id = c.id AND m.dequeue_at <= u.at + p_tolerance_ms))
    ON CONFLICT (channel_id, xact) DO UPDATE SET dequeue_at = excluded.dequeue_at
        WHERE excluded.dequeue_at < w.dequeue_at;
    GET DIAGNOSTICS v_marked = ROW_COUNT;
    IF v_marked > 0 THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_marked > 0;
END
$$;

-- A dequeuer's first step: apply the committed marks of a queue to their channels (only
-- ever earlier) and delete them, earliest first, in batches of 200 for at most about 10 ms
-- a call. Marks whose channel row another session holds stay for the next call; nothing
-- here waits. Each batch is taken from the queue's index in its order and only then joined
-- to its channel rows, so a batch costs the same whatever the number of marks left. A bulk
-- enqueue into 100,000 parked channels leaves 100,000 marks: applied 10,000 a call, after a
-- join and sort of all of them, they took each of the next ten dequeues past 100 ms
-- (docs/performance.md, "At scale"). The planner settings keep the index's order where the
-- table has no statistics yet (the default estimate of a queue's marks is a few hundred
-- rows, which the planner would rather fetch all and sort).
CREATE FUNCTION lonnymq_apply_marks_v1(p_queue text, p_tolerance_ms bigint) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
DECLARE
    v_start  timestamptz := pg_catalog.clock_timestamp();
    v_ids    bigint[];
    v_ats    bigint[];
    v_taken  integer;
BEGIN
    LOOP
        WITH picked AS (
            SELECT w.id, w.channel_id, w.dequeue_at
              FROM lonnymq_wake w
             WHERE w.queue = p_queue
             ORDER BY w.dequeue_at
             LIMIT 200
               FOR UPDATE OF w SKIP LOCKED
        ), marks AS (
            SELECT p.id, p.channel_id, p.dequeue_at
              FROM picked p
              JOIN lonnymq_channel c ON c.id = p.channel_id
               FOR NO KEY UPDATE OF c SKIP LOCKED
        ), gone AS (
            DELETE FROM lonnymq_wake w WHERE w.id IN (SELECT m.id FROM marks m)
            RETURNING w.channel_id, w.dequeue_at
        )
        SELECT pg_catalog.array_agg(g.channel_id ORDER BY g.channel_id), pg_catalog.array_agg(g.at ORDER BY g.channel_id),
               (SELECT pg_catalog.count(*) FROM picked)
          INTO v_ids, v_ats, v_taken
          FROM (SELECT channel_id, pg_catalog.min(dequeue_at) AS at FROM gone GROUP BY channel_id) g;
        IF v_ids IS NOT NULL THEN
            UPDATE lonnymq_channel c
               SET next_dequeue_at = greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until),
                   turn = pg_catalog.nextval('lonnymq_turn_seq') * 100000
              FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_ats)) AS u(id, at)
             WHERE c.id = u.id AND c.id = ANY (v_ids)
               AND (c.next_dequeue_at IS NULL
                    OR c.next_dequeue_at > greatest(u.at, c.last_dequeue_at + c.release_interval_ms, c.next_token_at, c.hold_until) + p_tolerance_ms);
        END IF;
        -- The queue's marks are all taken, or the rest are held by other dequeuers (rows this
        -- call holds come back to it: SKIP LOCKED skips only others'), or the time is spent.
        EXIT WHEN v_ids IS NULL OR v_taken < 200
               OR pg_catalog.clock_timestamp() - v_start > interval '10 milliseconds';
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------------------

-- A producer of new messages, once it holds its channels' shared advisory locks and before
-- it inserts: lock the channel rows FOR KEY SHARE (in id order) until it ends, and fail if one
-- is gone. p_ids are distinct channel ids. A prune or delete_channel (FOR UPDATE, then the
-- exclusive advisory lock, tried) passes a held row by, and a channel deleted after the
-- producer's lookup is found missing here: with a fresh snapshot under READ COMMITTED, since
-- the shared lock was granted only after the delete's exclusive one ended; under REPEATABLE
-- READ the row lock itself fails (40001). The error is SQLSTATE 23503 naming
-- lonnymq_message_channel_id_fkey, what the foreign key (dropped in 0036) raised: Python maps
-- it to ChannelGone. The foreign key's own check and lock, without the index of every
-- message by channel that its other side needed. The single enqueues (lonnymq_enqueue_v3,
-- lonnymq_enqueue_task_keyed_v1) write its lock out and call it only
-- when the row is missing, to raise the error.
CREATE FUNCTION lonnymq_hold_channels_v1(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_held integer;
BEGIN
    SELECT pg_catalog.count(*)::integer INTO v_held
      FROM (SELECT c.id FROM lonnymq_channel c WHERE c.id = ANY (p_ids) ORDER BY c.id FOR KEY SHARE OF c) h;
    IF v_held < coalesce(pg_catalog.cardinality(p_ids), 0) THEN
        RAISE EXCEPTION 'a channel was deleted (pruned as idle) after this enqueue looked it up; nothing was enqueued: retry the transaction'
            USING ERRCODE = '23503', CONSTRAINT = 'lonnymq_message_channel_id_fkey';
    END IF;
END
$$;

-- A keyed enqueue in mode 'replace' or 'update' (or 'skip', for a batch that mixes modes on
-- its keys): the one place that rule lives, for lonnymq_enqueue_v4 and
-- lonnymq_enqueue_many_v4 ('replace' takes the new cost and slots, 'update' keeps them). The caller has checked the row, holds the channel's shared
-- advisory lock and drew p_new_id for the row. The key's message is looked at as of now:
-- - no key (or the key was pruned, cancelled or its enqueue rolled back): a new message;
-- - 'skip': the key's message id, whatever became of that message (today's dedup);
-- - the key's message is waiting (ready, scheduled or backing off): 'replace' gives it the
--   payload, the run time, the priority and max_attempts of this enqueue; 'update' the
--   payload only. Its id, attempts and enqueued_at stay;
-- - the key's message is running (leased), or is gone (acked, dead): a new waiting message,
--   and the key names it from now on (its window restarts). A running message is never
--   touched, and enqueues never give a key two waiting messages.
-- Concurrent enqueues of one key queue up on the key's row (FOR UPDATE). The message row is
-- changed only while waiting: the UPDATE waits for a dequeuer that is leasing it and then
-- finds it leased. No lock is taken on a running message, so its ack never waits for a
-- producer's transaction. Returns the message id and the release time to wake the channel
-- for (NULL: none needed).
CREATE FUNCTION lonnymq_enqueue_keyed_v3(
    p_channel_id    bigint,
    p_dedup_key     text,
    p_on_duplicate  text,
    p_new_id        bigint,
    p_payload       jsonb,
    p_dequeue_at    bigint,
    p_priority      integer,
    p_max_attempts  integer,
    p_cost          integer,
    p_slots         integer,
    OUT id          bigint,
    OUT wake_at     bigint
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_held bigint;
BEGIN
    FOR v_try IN 1 .. 100 LOOP
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        VALUES (p_channel_id, p_dedup_key, p_new_id)
        ON CONFLICT (channel_id, dedup_key) DO NOTHING;
        IF FOUND THEN
            INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
            VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost,
                    p_slots);
            id := p_new_id;
            wake_at := p_dequeue_at;
            RETURN;
        END IF;
        IF p_on_duplicate = 'skip' THEN
            SELECT d.message_id INTO v_held FROM lonnymq_dedup d
             WHERE d.channel_id = p_channel_id AND d.dedup_key = p_dedup_key;
        ELSE
            SELECT d.message_id INTO v_held FROM lonnymq_dedup d
             WHERE d.channel_id = p_channel_id AND d.dedup_key = p_dedup_key
               FOR UPDATE;
        END IF;
        CONTINUE WHEN NOT FOUND;  -- freed meanwhile: claim it again
        id := v_held;
        IF p_on_duplicate = 'skip' THEN
            RETURN;
        ELSIF p_on_duplicate = 'replace' THEN
            UPDATE lonnymq_message m
               SET payload = p_payload, dequeue_at = p_dequeue_at, priority = p_priority,
                   max_attempts = p_max_attempts, cost = p_cost, slots = p_slots
             WHERE m.id = v_held AND m.lease_until IS NULL;
            IF FOUND THEN
                wake_at := p_dequeue_at;
                RETURN;
            END IF;
        ELSE
            UPDATE lonnymq_message m SET payload = p_payload
             WHERE m.id = v_held AND m.lease_until IS NULL;
            IF FOUND THEN
                RETURN;
            END IF;
        END IF;
        -- Running or gone: one new waiting message, which the key names from now on.
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
        VALUES (p_new_id, p_channel_id, p_payload, p_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost, p_slots);
        UPDATE lonnymq_dedup d SET message_id = p_new_id, created_at = pg_catalog.now()
         WHERE d.channel_id = p_channel_id AND d.dedup_key = p_dedup_key;
        id := p_new_id;
        wake_at := p_dequeue_at;
        RETURN;
    END LOOP;
    RAISE EXCEPTION 'dedup key % kept changing under this enqueue; retry the transaction', p_dedup_key
        USING ERRCODE = '40001';
END
$$;

-- lonnymq_enqueue_keyed_v3 at one slot per message: the Task functions' keyed enqueue.
CREATE FUNCTION lonnymq_enqueue_keyed_v2(
    p_channel_id    bigint,
    p_dedup_key     text,
    p_on_duplicate  text,
    p_new_id        bigint,
    p_payload       jsonb,
    p_dequeue_at    bigint,
    p_priority      integer,
    p_max_attempts  integer,
    p_cost          integer,
    OUT id          bigint,
    OUT wake_at     bigint
)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT k.id, k.wake_at
      FROM lonnymq_enqueue_keyed_v3(p_channel_id, p_dedup_key, p_on_duplicate, p_new_id, p_payload, p_dequeue_at,
                                    p_priority, p_max_attempts, p_cost, 1) k
$$;

-- A message that costs more than its channel's (or its queue's) token bucket can ever hold
-- could never be released: refused (LQ001, field cost) before anything is written. Called
-- only for costs above 1, so a queue that never uses costs pays nothing for it. A bucket
-- configured smaller later releases such a message once the bucket is full (the dequeue
-- charges at most the burst).
CREATE FUNCTION lonnymq_check_costs_v1(p_queue text, p_channel_ids bigint[], p_costs integer[], p_batch boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_bad record;
BEGIN
    SELECT u.cost, u.ord, c.name, c.rate_burst AS burst, 'channel' AS kind INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_costs)) WITH ORDINALITY AS u(channel_id, cost, ord)
      JOIN lonnymq_channel c ON c.id = u.channel_id
     WHERE u.cost > 1 AND c.rate_burst IS NOT NULL AND u.cost > c.rate_burst
     ORDER BY u.ord
     LIMIT 1;
    IF NOT FOUND THEN
        SELECT u.cost, u.ord, p_queue AS name, qc.rate_burst AS burst, 'queue' AS kind INTO v_bad
          FROM pg_catalog.unnest(p_costs) WITH ORDINALITY AS u(cost, ord)
          JOIN lonnymq_queue_config qc ON qc.queue = p_queue
         WHERE qc.rate_burst IS NOT NULL AND u.cost > qc.rate_burst
         ORDER BY u.ord
         LIMIT 1;
    END IF;
    IF v_bad.cost IS NOT NULL THEN
        PERFORM lonnymq_raise_invalid_v1(CASE WHEN p_batch THEN pg_catalog.format('items[%s].cost', v_bad.ord - 1)
                                              ELSE 'cost' END,
            pg_catalog.format('must be at most the burst of %s %s''s token bucket (%s): a message that costs more could never be released',
                              v_bad.kind, pg_catalog.quote_literal(v_bad.name), v_bad.burst),
            v_bad.cost::text);
    END IF;
END
$$;

-- A message that asks more slots than its channel's (or its queue's) concurrency cap could
-- never run: refused (LQ001, field slots) before anything is written. Called only for slots
-- above 1, so a queue that never uses them pays nothing. A cap configured smaller later runs
-- such a message once the cap is all free (the dequeue counts it at most the cap).
CREATE FUNCTION lonnymq_check_slots_v1(p_queue text, p_channel_ids bigint[], p_slots integer[], p_batch boolean)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_bad record;
BEGIN
    SELECT u.slots, u.ord, c.name, c.max_concurrency AS cap, 'channel' AS kind INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_slots)) WITH ORDINALITY AS u(channel_id, slots, ord)
      JOIN lonnymq_channel c ON c.id = u.channel_id
     WHERE u.slots > 1 AND c.max_concurrency IS NOT NULL AND u.slots > c.max_concurrency
     ORDER BY u.ord
     LIMIT 1;
    IF NOT FOUND THEN
        SELECT u.slots, u.ord, p_queue AS name, qc.max_concurrency AS cap, 'queue' AS kind INTO v_bad
          FROM pg_catalog.unnest(p_slots) WITH ORDINALITY AS u(slots, ord)
          JOIN lonnymq_queue_config qc ON qc.queue = p_queue
         WHERE qc.max_concurrency IS NOT NULL AND u.slots > qc.max_concurrency
         ORDER BY u.ord
         LIMIT 1;
    END IF;
    IF v_bad.slots IS NOT NULL THEN
        PERFORM lonnymq_raise_invalid_v1(CASE WHEN p_batch THEN pg_catalog.format('items[%s].slots', v_bad.ord - 1)
                                              ELSE 'slots' END,
            pg_catalog.format('must be at most the max_concurrency of %s %s (%s): a message that takes more slots could never run',
                              v_bad.kind, pg_catalog.quote_literal(v_bad.name), v_bad.cap),
            v_bad.slots::text);
    END IF;
END
$$;

-- One message with a dedup mode (docs/flow-control.md): the one single enqueue (api.enqueue,
-- a Django Task's message, a schedule's tick, a workflow's on_failure message). p_on_duplicate
-- is 'skip' (the key's first message stands), 'replace' (debounce) or 'update' (throttle); see
-- lonnymq_enqueue_keyed_v2. A mode other than 'skip'
-- needs a dedup key. p_cost: the tokens of the channel's and the queue's token buckets its
-- release takes (1 to 1,000,000; more than a bucket's burst is refused while the bucket
-- exists). p_slots: the units of the channel's and the queue's concurrency caps its lease
-- takes (1 to 1,000,000; more than a cap is refused while the cap exists). Returns the id of
-- the message the enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_v4(
    p_queue             text,
    p_channel           text,
    p_payload           jsonb,
    p_run_at_ms         bigint  DEFAULT NULL,
    p_delay_ms          bigint  DEFAULT NULL,
    p_priority          integer DEFAULT 0,
    p_dedup_key         text    DEFAULT NULL,
    p_on_duplicate      text    DEFAULT 'skip',
    p_max_attempts      integer DEFAULT 5,
    p_priority_step_ms  bigint  DEFAULT 1000,
    p_tolerance_ms      bigint  DEFAULT 50,
    p_cost              integer DEFAULT 1,
    p_slots             integer DEFAULT 1
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_now        bigint := lonnymq_now_ms_v1();
    v_dequeue_at bigint;
    v_channel_id bigint;
    v_id         bigint;
    v_wake_at    bigint;
BEGIN
    IF p_payload IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must not be null', NULL);
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM lonnymq_raise_invalid_v1('max_attempts', 'must be between 1 and 1000', p_max_attempts::text);
    END IF;
    IF p_dedup_key IS NOT NULL AND pg_catalog.char_length(p_dedup_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('dedup_key', 'must be 1 to 200 characters', pg_catalog.quote_literal(p_dedup_key));
    END IF;
    IF p_on_duplicate IS NULL OR p_on_duplicate NOT IN ('skip', 'replace', 'update') THEN
        PERFORM lonnymq_raise_invalid_v1('on_duplicate', 'must be skip, replace or update',
                                         pg_catalog.quote_nullable(p_on_duplicate));
    ELSIF p_on_duplicate <> 'skip' AND p_dedup_key IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('on_duplicate', 'needs a dedup_key', pg_catalog.quote_literal(p_on_duplicate));
    END IF;
    IF p_tolerance_ms IS NULL OR p_tolerance_ms NOT BETWEEN 0 AND 86400000 THEN
        PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    END IF;
    IF p_cost IS NULL OR p_cost NOT BETWEEN 1 AND 1000000 THEN
        PERFORM lonnymq_raise_invalid_v1('cost', 'must be an integer from 1 to 1000000', coalesce(p_cost::text, 'null'));
    END IF;
    IF p_slots IS NULL OR p_slots NOT BETWEEN 1 AND 1000000 THEN
        PERFORM lonnymq_raise_invalid_v1('slots', 'must be an integer from 1 to 1000000', coalesce(p_slots::text, 'null'));
    END IF;
    v_dequeue_at := lonnymq_dequeue_at_v1(v_now, p_run_at_ms, p_delay_ms, p_priority, p_priority_step_ms);
    v_channel_id := lonnymq_channel_id_v1(p_queue, p_channel);

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile (its
    -- lock, or its stripe's past the transaction's 64th channel lock).
    PERFORM lonnymq_lock_channel_v1(v_channel_id);
    -- No prune or delete_channel deletes its row until this transaction ends: the hold of
    -- lonnymq_hold_channels_v1, written out (a call per enqueue costs more than the lock).
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = v_channel_id FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);  -- gone: raises ChannelGone
    END IF;
    IF p_cost > 1 THEN
        PERFORM lonnymq_check_costs_v1(p_queue, ARRAY[v_channel_id], ARRAY[p_cost], false);
    END IF;
    IF p_slots > 1 THEN
        PERFORM lonnymq_check_slots_v1(p_queue, ARRAY[v_channel_id], ARRAY[p_slots], false);
    END IF;

    IF p_dedup_key IS NULL THEN
        v_id := pg_catalog.nextval('lonnymq_message_id_seq');
    ELSIF p_on_duplicate = 'skip' THEN
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        VALUES (v_channel_id, p_dedup_key, pg_catalog.nextval('lonnymq_message_id_seq'))
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id INTO v_id;
        IF v_id IS NULL THEN
            SELECT message_id INTO v_id FROM lonnymq_dedup
             WHERE channel_id = v_channel_id AND dedup_key = p_dedup_key;
            IF v_id IS NULL THEN
                RAISE EXCEPTION 'dedup key % was taken concurrently; retry the transaction', p_dedup_key
                    USING ERRCODE = '40001';
            END IF;
            RETURN v_id;
        END IF;
    ELSE
        SELECT k.id, k.wake_at INTO v_id, v_wake_at
          FROM lonnymq_enqueue_keyed_v3(v_channel_id, p_dedup_key, p_on_duplicate,
                                        pg_catalog.nextval('lonnymq_message_id_seq'), p_payload,
                                        v_dequeue_at, p_priority, p_max_attempts, p_cost, p_slots) k;
        IF v_wake_at IS NOT NULL THEN
            PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_wake_at, p_tolerance_ms);
        END IF;
        RETURN v_id;
    END IF;

    INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
    VALUES (v_id, v_channel_id, p_payload, v_dequeue_at, p_priority, p_max_attempts, p_dedup_key, p_cost, p_slots);

    PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_dequeue_at, p_tolerance_ms);
    RETURN v_id;
END
$$;

-- lonnymq_enqueue_v4 at one slot per message: the Task, schedule and workflow functions'
-- single enqueue.
CREATE FUNCTION lonnymq_enqueue_v3(
    p_queue             text,
    p_channel           text,
    p_payload           jsonb,
    p_run_at_ms         bigint  DEFAULT NULL,
    p_delay_ms          bigint  DEFAULT NULL,
    p_priority          integer DEFAULT 0,
    p_dedup_key         text    DEFAULT NULL,
    p_on_duplicate      text    DEFAULT 'skip',
    p_max_attempts      integer DEFAULT 5,
    p_priority_step_ms  bigint  DEFAULT 1000,
    p_tolerance_ms      bigint  DEFAULT 50,
    p_cost              integer DEFAULT 1
) RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT lonnymq_enqueue_v4(p_queue, p_channel, p_payload, p_run_at_ms, p_delay_ms, p_priority, p_dedup_key,
                              p_on_duplicate, p_max_attempts, p_priority_step_ms, p_tolerance_ms, p_cost, 1)
$$;

-- Many messages of one queue, any channels, in one call. Returns the ids in input order (the
-- existing id where a dedup key repeats, also within the batch). NULL arrays mean "defaults
-- for every row". Channels are created in name order and locked in id order, and dedup keys
-- are claimed in (channel, key) order, so concurrent batches never deadlock, whatever their
-- row order. p_costs and p_slots: each row's cost and slots (NULL array or element: 1; see
-- lonnymq_enqueue_v4).
-- p_on_duplicate is each row's dedup mode ('skip', 'replace' or 'update'; a NULL
-- array or element: 'skip'). A batch whose rows all skip runs as one set-based statement
-- (lonnymq_enqueue_many_v1's, unchanged). A batch with a 'replace' or 'update' row
-- inserts its keyless rows in that statement and applies its keyed rows through
-- lonnymq_enqueue_keyed_v3 one at a time, in (channel, key, input) order, each with the id
-- drawn for it in input order: the rows of one key behave as that many enqueues in input
-- order would, and every row gets the id of the message its enqueue created or changed.
CREATE FUNCTION lonnymq_enqueue_many_v4(
    p_queue            text,
    p_channels         text[],
    p_payloads         jsonb[],
    p_run_at_ms        bigint[]  DEFAULT NULL,
    p_delay_ms         bigint[]  DEFAULT NULL,
    p_priorities       integer[] DEFAULT NULL,
    p_dedup_keys       text[]    DEFAULT NULL,
    p_on_duplicate     text[]    DEFAULT NULL,
    p_max_attempts     integer[] DEFAULT NULL,
    p_default_max_attempts integer DEFAULT 5,
    p_priority_step_ms bigint    DEFAULT 1000,
    p_tolerance_ms     bigint    DEFAULT 50,
    p_costs            integer[] DEFAULT NULL,
    p_slots            integer[] DEFAULT NULL
) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_now            bigint := lonnymq_now_ms_v1();
    v_n              integer := coalesce(pg_catalog.cardinality(p_payloads), 0);
    v_bad            record;
    v_channel_ids    bigint[];
    v_channel_names  text[];
    v_missing        bigint;
    v_ids            bigint[];
    v_row_channels   bigint[];
    v_inserted_ids   bigint[];
    v_wake_ids       bigint[];
    v_wake_ats       bigint[];
    v_keyed          boolean;
    v_got            record;
    v_k_ords         bigint[];
    v_k_channels     bigint[];
    v_k_keys         text[];
    v_k_modes        text[];
    v_k_new_ids      bigint[];
    v_k_payloads     jsonb[];
    v_k_ats          bigint[];
    v_k_priorities   integer[];
    v_k_attempts     integer[];
    v_k_costs        integer[];
    v_k_slots        integer[];
    v_k_wake_ids     bigint[] := ARRAY[]::bigint[];
    v_k_wake_ats     bigint[] := ARRAY[]::bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_delay_ms IS NOT NULL AND pg_catalog.cardinality(p_delay_ms) <> v_n)
       OR (p_priorities IS NOT NULL AND pg_catalog.cardinality(p_priorities) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_on_duplicate IS NOT NULL AND pg_catalog.cardinality(p_on_duplicate) <> v_n)
       OR (p_max_attempts IS NOT NULL AND pg_catalog.cardinality(p_max_attempts) <> v_n)
       OR (p_costs IS NOT NULL AND pg_catalog.cardinality(p_costs) <> v_n)
       OR (p_slots IS NOT NULL AND pg_catalog.cardinality(p_slots) <> v_n) THEN
        PERFORM lonnymq_raise_invalid_v1('items', 'arrays must all have the same length', v_n::text);
    END IF;
    PERFORM lonnymq_check_list_v1('channels', pg_catalog.array_ndims(p_channels));
    PERFORM lonnymq_check_list_v1('payloads', pg_catalog.array_ndims(p_payloads));
    PERFORM lonnymq_check_list_v1('run_at', pg_catalog.array_ndims(p_run_at_ms));
    PERFORM lonnymq_check_list_v1('delay', pg_catalog.array_ndims(p_delay_ms));
    PERFORM lonnymq_check_list_v1('priorities', pg_catalog.array_ndims(p_priorities));
    PERFORM lonnymq_check_list_v1('dedup_keys', pg_catalog.array_ndims(p_dedup_keys));
    PERFORM lonnymq_check_list_v1('on_duplicate', pg_catalog.array_ndims(p_on_duplicate));
    PERFORM lonnymq_check_list_v1('max_attempts', pg_catalog.array_ndims(p_max_attempts));
    PERFORM lonnymq_check_list_v1('costs', pg_catalog.array_ndims(p_costs));
    PERFORM lonnymq_check_list_v1('slots', pg_catalog.array_ndims(p_slots));
    IF v_n = 0 THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    PERFORM lonnymq_check_names_v1(p_queue, 'x'::text);
    PERFORM lonnymq_check_range_v1('priority_step', p_priority_step_ms, 0::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);

    -- One pass finds the first invalid row, if any; the batch is refused as a whole and the
    -- error names the row (items[i], counted from 0).
    SELECT u.* INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_payloads),
                      pg_catalog.unnest(coalesce(p_run_at_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_delay_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_priorities, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_dedup_keys, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                      pg_catalog.unnest(coalesce(p_on_duplicate, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))))
           WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, on_duplicate, ord)
     WHERE u.channel IS NULL OR pg_catalog.char_length(u.channel) NOT BETWEEN 1 AND 200 OR u.channel !~ '\S'
        OR u.payload IS NULL
        OR pg_catalog.jsonb_path_exists(u.payload, 'strict $.**{101}'::jsonpath)
        OR coalesce(u.max_attempts, p_default_max_attempts) IS NULL
        OR coalesce(u.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000
        OR (u.dedup_key IS NOT NULL AND pg_catalog.char_length(u.dedup_key) NOT BETWEEN 1 AND 200)
        OR coalesce(u.on_duplicate, 'skip') NOT IN ('skip', 'replace', 'update')
        OR (coalesce(u.on_duplicate, 'skip') <> 'skip' AND u.dedup_key IS NULL)
        OR coalesce(u.priority, 0) NOT BETWEEN 0 AND 100
        OR u.delay NOT BETWEEN 0 AND 3155760000000
        OR u.run_at NOT BETWEEN 0 AND v_now + 3155760000000
        OR (u.run_at IS NOT NULL AND u.delay IS NOT NULL)
        OR (coalesce(u.priority, 0) > 0 AND coalesce(u.run_at, v_now + coalesce(u.delay, 0)) > v_now)
        OR coalesce(p_costs[u.ord], 1) NOT BETWEEN 1 AND 1000000
        OR coalesce(p_slots[u.ord], 1) NOT BETWEEN 1 AND 1000000
     ORDER BY u.ord
     LIMIT 1;
    IF FOUND THEN
        IF v_bad.channel IS NULL OR pg_catalog.char_length(v_bad.channel) NOT BETWEEN 1 AND 200
           OR v_bad.channel !~ '\S' THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].channel', v_bad.ord - 1),
                'must be 1 to 200 characters, not only blanks', pg_catalog.quote_nullable(v_bad.channel));
        ELSIF v_bad.payload IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].payload', v_bad.ord - 1), 'must not be null', NULL);
        ELSIF pg_catalog.jsonb_path_exists(v_bad.payload, 'strict $.**{101}'::jsonpath) THEN
            PERFORM lonnymq_raise_too_deep_v1(pg_catalog.format('items[%s].payload', v_bad.ord - 1), v_bad.payload);
        ELSIF coalesce(v_bad.max_attempts, p_default_max_attempts) IS NULL
              OR coalesce(v_bad.max_attempts, p_default_max_attempts) NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].max_attempts', v_bad.ord - 1),
                'must be between 1 and 1000', coalesce(v_bad.max_attempts, p_default_max_attempts)::text);
        ELSIF v_bad.dedup_key IS NOT NULL AND pg_catalog.char_length(v_bad.dedup_key) NOT BETWEEN 1 AND 200 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].dedup_key', v_bad.ord - 1),
                'must be 1 to 200 characters', pg_catalog.quote_literal(v_bad.dedup_key));
        ELSIF coalesce(v_bad.on_duplicate, 'skip') NOT IN ('skip', 'replace', 'update') THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].on_duplicate', v_bad.ord - 1),
                'must be skip, replace or update', pg_catalog.quote_literal(v_bad.on_duplicate));
        ELSIF coalesce(v_bad.on_duplicate, 'skip') <> 'skip' AND v_bad.dedup_key IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].on_duplicate', v_bad.ord - 1),
                'needs a dedup_key', pg_catalog.quote_literal(v_bad.on_duplicate));
        ELSIF coalesce(p_costs[v_bad.ord], 1) NOT BETWEEN 1 AND 1000000 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].cost', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', p_costs[v_bad.ord]::text);
        ELSIF coalesce(p_slots[v_bad.ord], 1) NOT BETWEEN 1 AND 1000000 THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].slots', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', p_slots[v_bad.ord]::text);
        ELSE
            -- Priority, delay or run time: the same checks and errors as a single enqueue.
            PERFORM lonnymq_dequeue_at_v1(v_now, v_bad.run_at, v_bad.delay, coalesce(v_bad.priority, 0),
                                          p_priority_step_ms);
        END IF;
    END IF;

    -- A batch with a 'replace' or 'update' row takes its keyed rows one by one (below);
    -- otherwise every row goes through the one set-based statement.
    v_keyed := p_on_duplicate IS NOT NULL AND p_dedup_keys IS NOT NULL
               AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p_on_duplicate) AS o(mode) WHERE o.mode <> 'skip');

    -- Every channel's id, from its key (one row version, however many a held snapshot keeps
    -- of the channel's row); then the missing ones, in name order: their keys first (the key
    -- decides who creates a channel), then their rows, which the setting tells the key's
    -- trigger are keyed (lonnymq_channel_key_v1); then every channel's shared lock in id order
    -- ("an enqueue into this channel is in flight"). The lookup is a join: "name = ANY
    -- (array)" would, in the generic plan, test every channel of the queue against the whole
    -- batch.
    FOR i IN 1 .. 2 LOOP
        SELECT pg_catalog.array_agg(c.id ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
               pg_catalog.array_agg(c.name ORDER BY c.id) FILTER (WHERE c.id IS NOT NULL),
               pg_catalog.count(*) - pg_catalog.count(c.id)
          INTO v_channel_ids, v_channel_names, v_missing
          FROM (SELECT DISTINCT u.name FROM pg_catalog.unnest(p_channels) AS u(name)) u
          LEFT JOIN lonnymq_channel_key c ON c.queue = p_queue AND c.name = u.name;
        EXIT WHEN v_missing = 0;
        IF i = 2 THEN
            RAISE EXCEPTION 'a channel of queue % was created concurrently; retry the transaction', p_queue
                USING ERRCODE = '40001';
        END IF;
        PERFORM pg_catalog.set_config('lonnymq.channel_keys', 'written', true);
        WITH created AS (
            INSERT INTO lonnymq_channel_key (queue, name)
            SELECT DISTINCT p_queue, u.name FROM pg_catalog.unnest(p_channels) AS u(name)
             WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel_key k WHERE k.queue = p_queue AND k.name = u.name)
             ORDER BY 2
            ON CONFLICT (queue, name) DO NOTHING
            RETURNING id, queue, name
        )
        INSERT INTO lonnymq_channel (id, queue, name) SELECT n.id, n.queue, n.name FROM created n ORDER BY n.name;
        PERFORM pg_catalog.set_config('lonnymq.channel_keys', '', true);
    END LOOP;
    PERFORM lonnymq_lock_channels_v1(v_channel_ids);
    PERFORM lonnymq_hold_channels_v1(v_channel_ids);
    -- Costs above 1 only: a queue that never uses costs pays nothing for the check.
    IF p_costs IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p_costs) AS u(cost) WHERE u.cost > 1) THEN
        PERFORM lonnymq_check_costs_v1(
            p_queue,
            (SELECT pg_catalog.array_agg(f.id ORDER BY u.ord)
               FROM pg_catalog.unnest(p_channels) WITH ORDINALITY AS u(name, ord)
               JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name)
                 ON f.name = u.name),
            p_costs, true);
    END IF;
    -- Slots above 1 only, likewise.
    IF p_slots IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p_slots) AS u(slots) WHERE u.slots > 1) THEN
        PERFORM lonnymq_check_slots_v1(
            p_queue,
            (SELECT pg_catalog.array_agg(f.id ORDER BY u.ord)
               FROM pg_catalog.unnest(p_channels) WITH ORDINALITY AS u(name, ord)
               JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name)
                 ON f.name = u.name),
            p_slots, true);
    END IF;

    -- One statement: stage the rows in memory with their ids drawn in input order (the sorted
    -- subquery), so a batch keeps FIFO within a channel; claim the dedup keys in (channel,
    -- key) order, the first row of a key in the batch winning; insert the messages whose key
    -- was claimed or that have none; report each channel's earliest new message for the wake.
    -- dequeue_at is lonnymq_dequeue_at_v1's rule, inlined (every row is valid by now).
    WITH rows AS MATERIALIZED (
        SELECT s.*, pg_catalog.nextval('lonnymq_message_id_seq') AS new_id
          FROM (SELECT u.ord, f.id AS channel_id, u.payload,
                       coalesce(u.run_at, v_now + coalesce(u.delay, 0))
                           - coalesce(u.priority, 0)::bigint * p_priority_step_ms AS dequeue_at,
                       coalesce(u.priority, 0) AS priority, u.dedup_key,
                       coalesce(u.max_attempts, p_default_max_attempts) AS max_attempts,
                       coalesce(u.on_duplicate, 'skip') AS on_duplicate, coalesce(p_costs[u.ord], 1) AS cost,
                       coalesce(p_slots[u.ord], 1) AS slots
                  FROM ROWS FROM (pg_catalog.unnest(p_channels),
                                  pg_catalog.unnest(p_payloads),
                                  pg_catalog.unnest(coalesce(p_run_at_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_delay_ms, pg_catalog.array_fill(NULL::bigint, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_priorities, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_dedup_keys, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_max_attempts, pg_catalog.array_fill(NULL::integer, ARRAY[v_n]))),
                                  pg_catalog.unnest(coalesce(p_on_duplicate, pg_catalog.array_fill(NULL::text, ARRAY[v_n]))))
                       WITH ORDINALITY AS u(channel, payload, run_at, delay, priority, dedup_key, max_attempts, on_duplicate, ord)
                  JOIN ROWS FROM (pg_catalog.unnest(v_channel_ids), pg_catalog.unnest(v_channel_names)) AS f(id, name) ON f.name = u.channel
                 ORDER BY u.ord) s
    ), claimed AS (
        INSERT INTO lonnymq_dedup (channel_id, dedup_key, message_id)
        SELECT DISTINCT ON (r.channel_id, r.dedup_key) r.channel_id, r.dedup_key, r.new_id
          FROM rows r
         WHERE r.dedup_key IS NOT NULL AND NOT v_keyed
         ORDER BY r.channel_id, r.dedup_key, r.ord
        ON CONFLICT (channel_id, dedup_key) DO NOTHING
        RETURNING message_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key, cost, slots)
        SELECT r.new_id, r.channel_id, r.payload, r.dequeue_at, r.priority, r.max_attempts, r.dedup_key, r.cost, r.slots
          FROM rows r
         WHERE r.dedup_key IS NULL OR (NOT v_keyed AND r.new_id IN (SELECT c.message_id FROM claimed c))
        RETURNING id, channel_id, dequeue_at
    ), keyed AS MATERIALIZED (
        -- A batch with modes: its keyed rows, left to the loop below.
        SELECT r.* FROM rows r WHERE v_keyed AND r.dedup_key IS NOT NULL
    ), woken AS (
        SELECT i.channel_id, pg_catalog.min(i.dequeue_at) AS at FROM inserted i GROUP BY i.channel_id
    )
    SELECT (SELECT pg_catalog.array_agg(r.new_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(r.channel_id ORDER BY r.ord) FROM rows r),
           (SELECT pg_catalog.array_agg(i.id) FROM inserted i),
           (SELECT pg_catalog.array_agg(w.channel_id ORDER BY w.channel_id) FROM woken w),
           (SELECT pg_catalog.array_agg(w.at ORDER BY w.channel_id) FROM woken w),
           k.ords, k.channels, k.keys, k.modes, k.new_ids, k.payloads, k.ats, k.priorities, k.attempts, k.costs,
           k.slots
      INTO v_ids, v_row_channels, v_inserted_ids, v_wake_ids, v_wake_ats,
           v_k_ords, v_k_channels, v_k_keys, v_k_modes, v_k_new_ids, v_k_payloads, v_k_ats, v_k_priorities,
           v_k_attempts, v_k_costs, v_k_slots
      FROM (SELECT pg_catalog.array_agg(k.ord ORDER BY k.channel_id, k.dedup_key, k.ord) AS ords,
                   pg_catalog.array_agg(k.channel_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS channels,
                   pg_catalog.array_agg(k.dedup_key ORDER BY k.channel_id, k.dedup_key, k.ord) AS keys,
                   pg_catalog.array_agg(k.on_duplicate ORDER BY k.channel_id, k.dedup_key, k.ord) AS modes,
                   pg_catalog.array_agg(k.new_id ORDER BY k.channel_id, k.dedup_key, k.ord) AS new_ids,
                   pg_catalog.array_agg(k.payload ORDER BY k.channel_id, k.dedup_key, k.ord) AS payloads,
                   pg_catalog.array_agg(k.dequeue_at ORDER BY k.channel_id, k.dedup_key, k.ord) AS ats,
                   pg_catalog.array_agg(k.priority ORDER BY k.channel_id, k.dedup_key, k.ord) AS priorities,
                   pg_catalog.array_agg(k.max_attempts ORDER BY k.channel_id, k.dedup_key, k.ord) AS attempts,
                   pg_catalog.array_agg(k.cost ORDER BY k.channel_id, k.dedup_key, k.ord) AS costs,
                   pg_catalog.array_agg(k.slots ORDER BY k.channel_id, k.dedup_key, k.ord) AS slots
              FROM keyed k) k;

    -- A batch with modes: its keyed rows one at a time, in (channel, key, input) order, so
    -- the rows of one key apply in input order (as that many enqueues would) and concurrent
    -- batches take the keys' locks in one order. Each keeps the id drawn for it above.
    IF v_k_ords IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.cardinality(v_k_ords) LOOP
            SELECT k.id, k.wake_at INTO v_got
              FROM lonnymq_enqueue_keyed_v3(v_k_channels[i], v_k_keys[i], v_k_modes[i], v_k_new_ids[i],
                                            v_k_payloads[i], v_k_ats[i], v_k_priorities[i], v_k_attempts[i],
                                            v_k_costs[i], v_k_slots[i]) k;
            v_ids[v_k_ords[i]::integer] := v_got.id;
            IF v_got.wake_at IS NOT NULL THEN
                v_k_wake_ids := pg_catalog.array_append(v_k_wake_ids, v_k_channels[i]);
                v_k_wake_ats := pg_catalog.array_append(v_k_wake_ats, v_got.wake_at);
            END IF;
        END LOOP;
        SELECT pg_catalog.array_agg(w.id ORDER BY w.id), pg_catalog.array_agg(w.at ORDER BY w.id)
          INTO v_wake_ids, v_wake_ats
          FROM (SELECT u.id, pg_catalog.min(u.at) AS at
                  FROM (SELECT * FROM ROWS FROM (pg_catalog.unnest(v_wake_ids), pg_catalog.unnest(v_wake_ats)) AS a(id, at)
                        UNION ALL
                        SELECT * FROM ROWS FROM (pg_catalog.unnest(v_k_wake_ids), pg_catalog.unnest(v_k_wake_ats)) AS b(id, at)) u
                 WHERE u.id IS NOT NULL
                 GROUP BY u.id) w;
    END IF;

    -- Rows whose key was already taken (earlier, by a concurrent batch, or by an earlier row
    -- of this one) get the existing id: one index probe each, in a new statement that sees
    -- the commits ON CONFLICT waited for. A key whose row vanished meanwhile (its holder
    -- rolled back, or it was cancelled or pruned) has no id to give: like a single enqueue,
    -- the batch fails with a serialization error, for the caller to retry.
    IF NOT v_keyed AND coalesce(pg_catalog.cardinality(v_inserted_ids), 0) < v_n THEN
        SELECT pg_catalog.array_agg(CASE WHEN i.id IS NOT NULL OR x.dedup_key IS NULL THEN x.id
                              ELSE (SELECT d.message_id FROM lonnymq_dedup d
                                     WHERE d.channel_id = x.channel_id AND d.dedup_key = x.dedup_key)
                         END ORDER BY x.ord)
          INTO v_ids
          FROM ROWS FROM (pg_catalog.unnest(v_ids), pg_catalog.unnest(v_row_channels), pg_catalog.unnest(p_dedup_keys)) WITH ORDINALITY AS x(id, channel_id, dedup_key, ord)
          LEFT JOIN pg_catalog.unnest(v_inserted_ids) AS i(id) ON i.id = x.id;
        IF pg_catalog.array_position(v_ids, NULL::bigint) IS NOT NULL THEN
            RAISE EXCEPTION 'dedup key % was taken concurrently; retry the transaction',
                p_dedup_keys[pg_catalog.array_position(v_ids, NULL::bigint)]
                USING ERRCODE = '40001';
        END IF;
    END IF;

    IF v_wake_ids IS NOT NULL THEN
        PERFORM lonnymq_mark_many_v1(p_queue, v_wake_ids, v_wake_ats, p_tolerance_ms);
    END IF;
    RETURN v_ids;
END
$$;

-- A Django Task in one call (django_lonnymq.tasks): its message, then its result row, so an
-- enqueue outside a transaction is one statement and one round trip. The payload carries
-- the result's id, backend alias, task path, args and kwargs; the row copies them from it.
CREATE FUNCTION lonnymq_enqueue_task_v1(
    p_queue            text,
    p_channel          text,
    p_payload          jsonb,
    p_run_at_ms        bigint,
    p_priority         integer,
    p_max_attempts     integer,
    p_run_after        timestamptz,
    p_enqueued_at      timestamptz,
    p_priority_step_ms bigint DEFAULT 1000,
    p_tolerance_ms     bigint DEFAULT 50
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_field text;
    v_id    bigint;
BEGIN
    IF p_payload IS NULL OR pg_catalog.jsonb_typeof(p_payload) IS DISTINCT FROM 'object' THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must be a task message (a JSON object)', pg_catalog.left(p_payload::text, 100));
    END IF;
    FOREACH v_field IN ARRAY ARRAY['result_id', 'backend', 'task']::text[] LOOP
        IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) v_field) IS DISTINCT FROM 'string'
           OR pg_catalog.char_length(p_payload OPERATOR(pg_catalog.->>) v_field) NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1('payload.' OPERATOR(pg_catalog.||) v_field, 'must be a string of 1 to 1000 characters',
                                              pg_catalog.left((p_payload OPERATOR(pg_catalog.->) v_field)::text, 100));
        END IF;
    END LOOP;
    IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) 'args'::text) IS DISTINCT FROM 'array' THEN
        PERFORM lonnymq_raise_invalid_v1('payload.args', 'must be a JSON array', NULL);
    END IF;
    IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) 'kwargs'::text) IS DISTINCT FROM 'object' THEN
        PERFORM lonnymq_raise_invalid_v1('payload.kwargs', 'must be a JSON object', NULL);
    END IF;
    IF p_enqueued_at IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('enqueued_at', 'must not be null', NULL);
    END IF;

    v_id := lonnymq_enqueue_v3(p_queue, p_channel, p_payload, p_run_at_ms, NULL::bigint, p_priority, NULL::text,
                               'skip'::text, p_max_attempts, p_priority_step_ms, p_tolerance_ms, 1);
    INSERT INTO lonnymq_task_result (id, backend, task_path, queue, channel, message_id, status, args, kwargs,
                                     priority, run_after, enqueued_at)
    VALUES (p_payload OPERATOR(pg_catalog.->>) 'result_id'::text, p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
            p_payload OPERATOR(pg_catalog.->>) 'task'::text, p_queue, p_channel, v_id, 'READY',
            p_payload OPERATOR(pg_catalog.->) 'args'::text, p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
            p_priority, p_run_after, p_enqueued_at);
    RETURN v_id;
END
$$;

-- A Django Task with a dedup key (django_lonnymq.tasks.dedup; docs/tasks.md): the rule of
-- lonnymq_enqueue_keyed_v2 for the key's message, and one result row per message. The
-- key's row is locked first (FOR UPDATE, in 'replace' and 'update'), so the result read
-- beside it is that of the message the key names until this transaction ends:
-- - a new message (no key yet, or the key's message is running or finished in 'replace'
--   and 'update'): its own new result row, READY; outcome 'created';
-- - 'skip' of a key that has a message: nothing is written, the key's message's result row
--   is returned (whatever its status); outcome 'skipped'. A key whose message has no result
--   row (not a task message, or its result was pruned) is refused;
-- - 'replace' / 'update' of a waiting message: the message takes this payload with its own
--   result id kept, and that result row takes this task, args and kwargs ('replace': its
--   priority and run_after too); outcome 'changed'. No second result row is made, so a
--   replaced enqueue leaves nothing READY behind.
CREATE FUNCTION lonnymq_enqueue_task_keyed_v1(
    p_queue            text,
    p_channel          text,
    p_payload          jsonb,
    p_run_at_ms        bigint,
    p_priority         integer,
    p_max_attempts     integer,
    p_run_after        timestamptz,
    p_enqueued_at      timestamptz,
    p_dedup_key        text,
    p_on_duplicate     text,
    p_priority_step_ms bigint DEFAULT 1000,
    p_tolerance_ms     bigint DEFAULT 50,
    OUT outcome        text,
    OUT result         lonnymq_task_result
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_field      text;
    v_dequeue_at bigint;
    v_channel_id bigint;
    v_new_id     bigint;
    v_old_result text;
    v_payload    jsonb := p_payload;
    v_id         bigint;
    v_wake_at    bigint;
BEGIN
    IF p_payload IS NULL OR pg_catalog.jsonb_typeof(p_payload) IS DISTINCT FROM 'object' THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must be a task message (a JSON object)', pg_catalog.left(p_payload::text, 100));
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    END IF;
    FOREACH v_field IN ARRAY ARRAY['result_id', 'backend', 'task']::text[] LOOP
        IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) v_field) IS DISTINCT FROM 'string'
           OR pg_catalog.char_length(p_payload OPERATOR(pg_catalog.->>) v_field) NOT BETWEEN 1 AND 1000 THEN
            PERFORM lonnymq_raise_invalid_v1('payload.' OPERATOR(pg_catalog.||) v_field, 'must be a string of 1 to 1000 characters',
                                              pg_catalog.left((p_payload OPERATOR(pg_catalog.->) v_field)::text, 100));
        END IF;
    END LOOP;
    IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) 'args'::text) IS DISTINCT FROM 'array' THEN
        PERFORM lonnymq_raise_invalid_v1('payload.args', 'must be a JSON array', NULL);
    END IF;
    IF pg_catalog.jsonb_typeof(p_payload OPERATOR(pg_catalog.->) 'kwargs'::text) IS DISTINCT FROM 'object' THEN
        PERFORM lonnymq_raise_invalid_v1('payload.kwargs', 'must be a JSON object', NULL);
    END IF;
    IF p_enqueued_at IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('enqueued_at', 'must not be null', NULL);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM lonnymq_raise_invalid_v1('max_attempts', 'must be between 1 and 1000', p_max_attempts::text);
    END IF;
    IF p_dedup_key IS NULL OR pg_catalog.char_length(p_dedup_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('dedup_key', 'must be 1 to 200 characters', pg_catalog.quote_nullable(p_dedup_key));
    END IF;
    IF p_on_duplicate IS NULL OR p_on_duplicate NOT IN ('skip', 'replace', 'update') THEN
        PERFORM lonnymq_raise_invalid_v1('on_duplicate', 'must be skip, replace or update',
                                         pg_catalog.quote_nullable(p_on_duplicate));
    END IF;
    IF p_tolerance_ms IS NULL OR p_tolerance_ms NOT BETWEEN 0 AND 86400000 THEN
        PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    END IF;
    v_dequeue_at := lonnymq_dequeue_at_v1(lonnymq_now_ms_v1(), p_run_at_ms, NULL::bigint, p_priority, p_priority_step_ms);
    v_channel_id := lonnymq_channel_id_v1(p_queue, p_channel);

    -- "An enqueue into this channel is in flight": dequeuers will not park it meanwhile (its
    -- lock, or its stripe's past the transaction's 64th channel lock).
    PERFORM lonnymq_lock_channel_v1(v_channel_id);
    -- No prune or delete_channel deletes its row until this transaction ends: the hold of
    -- lonnymq_hold_channels_v1, written out (a call per enqueue costs more than the lock).
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = v_channel_id FOR KEY SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);  -- gone: raises ChannelGone
    END IF;
    v_new_id := pg_catalog.nextval('lonnymq_message_id_seq');

    IF p_on_duplicate <> 'skip' THEN
        -- The key's row, locked (lonnymq_enqueue_keyed_v2 then finds it held by this
        -- transaction): its message, and so the result read here, cannot change meanwhile.
        -- A key another producer has just written is not seen here (not yet committed); the
        -- result of the message changed is then looked up once the key's row is held, below.
        SELECT r.id INTO v_old_result
          FROM lonnymq_dedup d JOIN lonnymq_task_result r ON r.message_id = d.message_id
         WHERE d.channel_id = v_channel_id AND d.dedup_key = p_dedup_key
           FOR UPDATE OF d;
        IF v_old_result IS NOT NULL THEN
            v_payload := p_payload OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('result_id', v_old_result);
        END IF;
    END IF;

    SELECT k.id, k.wake_at INTO v_id, v_wake_at
      FROM lonnymq_enqueue_keyed_v2(v_channel_id, p_dedup_key, p_on_duplicate, v_new_id, v_payload,
                                    v_dequeue_at, p_priority, p_max_attempts, 1) k;
    IF v_wake_at IS NOT NULL THEN
        PERFORM lonnymq_mark_v1(p_queue, v_channel_id, v_wake_at, p_tolerance_ms);
    END IF;

    IF v_id = v_new_id THEN
        -- A new message, with its own result.
        IF v_payload IS DISTINCT FROM p_payload THEN
            -- The key's message started or finished: the new message carries its own result id.
            UPDATE lonnymq_message m SET payload = p_payload WHERE m.id = v_new_id;
        END IF;
        outcome := 'created';
    ELSIF p_on_duplicate = 'skip' THEN
        SELECT * INTO result FROM lonnymq_task_result r WHERE r.message_id = v_id;
        IF NOT FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('dedup_key',
                'names a message that has no task result (not a task message, or its result was pruned)',
                pg_catalog.quote_literal(p_dedup_key));
        END IF;
        outcome := 'skipped';
        RETURN;
    ELSE
        -- The key's waiting message took v_payload. This transaction now holds the key's row
        -- and the message's row.
        outcome := 'changed';
        IF v_old_result IS NULL THEN
            SELECT r.id INTO v_old_result FROM lonnymq_task_result r WHERE r.message_id = v_id;
            IF FOUND THEN  -- written by a producer that committed after the first look
                UPDATE lonnymq_message m
                   SET payload = p_payload OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object('result_id', v_old_result)
                 WHERE m.id = v_id;
            END IF;
        END IF;
        IF v_old_result IS NOT NULL THEN
            UPDATE lonnymq_task_result r
               SET backend = p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
                   task_path = p_payload OPERATOR(pg_catalog.->>) 'task'::text,
                   args = p_payload OPERATOR(pg_catalog.->) 'args'::text,
                   kwargs = p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
                   priority = CASE WHEN p_on_duplicate = 'replace' THEN p_priority ELSE r.priority END,
                   run_after = CASE WHEN p_on_duplicate = 'replace' THEN p_run_after ELSE r.run_after END
             WHERE r.id = v_old_result
            RETURNING * INTO result;
            RETURN;
        END IF;
        -- A plain message of the key (no result row): it is this task's now.
    END IF;
    INSERT INTO lonnymq_task_result (id, backend, task_path, queue, channel, message_id, status, args, kwargs,
                                     priority, run_after, enqueued_at)
    VALUES (p_payload OPERATOR(pg_catalog.->>) 'result_id'::text, p_payload OPERATOR(pg_catalog.->>) 'backend'::text,
            p_payload OPERATOR(pg_catalog.->>) 'task'::text, p_queue, p_channel, v_id, 'READY',
            p_payload OPERATOR(pg_catalog.->) 'args'::text, p_payload OPERATOR(pg_catalog.->) 'kwargs'::text,
            p_priority, p_run_after, p_enqueued_at)
    RETURNING * INTO result;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Dequeue
-- ---------------------------------------------------------------------------------------

-- The functions a drain calls for every batch (the two dequeues and the ack) run their
-- statements on generic plans: statements over id arrays were planned afresh at every call
-- (their custom plans looked cheaper than the generic one), which was a third of the time
-- of a dequeue or an ack of one message.
-- They plan without sequential scans: a generic plan lasts the session (until the table's
-- next VACUUM or ANALYZE), and one made while the message table held a row or two scanned
-- all of it. A worker that planned its dequeue on a one-row table then took 130 ms to lease
-- 50 of 200,000 messages, against 2 ms for a worker that planned later. Without JIT, which
-- a plan over a node those settings disable would otherwise pay on every call.

-- Where a session's candidate scans of a queue start (lonnymq_dequeue_v1's step 2 and
-- lonnymq_dequeue_held_v1), after a scan from the front of the channels' ranges in the ready
-- index that read p_read entries for p_taken candidates. Read more than 1,000 entries beyond
-- twice the candidates (the entries a held snapshot keeps for every message taken since it
-- began, which no VACUUM removes and no scan can mark dead), and the session's scans start
-- after the last message a dequeue took from each channel until p_now plus 1 ms per 10
-- entries read (at most a second), then from the front again; read fewer, and every scan is
-- from the front. The state is a session setting, as the eligible scan's mark is, and since
-- 0062 the queue's other sessions share it (lonnymq_ready_mark, lonnymq_ready_after_v1): the
-- session holding the queue's advisory lock writes the time, or deletes it once it is cleared.
CREATE FUNCTION lonnymq_ready_from_v1(p_queue text, p_now bigint, p_read bigint, p_taken integer) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_name  text := 'lonnymq.ready_from_' || pg_catalog.md5(p_queue);
    v_was   text := coalesce(pg_catalog.current_setting(v_name, true), '');
    v_until bigint := CASE WHEN p_read > 1000 + 2 * p_taken::bigint THEN p_now + least(p_read / 10, 1000) END;
BEGIN
    PERFORM pg_catalog.set_config(v_name, coalesce(v_until::text, ''), false);
    IF (v_until IS NOT NULL OR v_was <> '')
       AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_ready_lock_ns_v1(), pg_catalog.hashtext(p_queue)) THEN
        IF v_until IS NOT NULL THEN
            INSERT INTO lonnymq_ready_mark AS rm (queue, until) VALUES (p_queue, v_until)
                ON CONFLICT (queue) DO UPDATE SET until = excluded.until;
        ELSE
            DELETE FROM lonnymq_ready_mark rm WHERE rm.queue = p_queue;
        END IF;
    END IF;
END
$$;

-- Whether this call's candidate scans of a queue start after the last message taken from
-- each channel (p_state: the session's setting, lonnymq_ready_from_v1). Until the time it
-- names, yes; after it, this session is due for a scan from the front, which the queue's
-- sessions share: while the time another session wrote after its own scan (lonnymq_ready_mark)
-- is ahead, this session takes it; else the session that gets the queue's advisory lock scans
-- from the front, and the others start after the taken meanwhile.
CREATE FUNCTION lonnymq_ready_after_v1(p_queue text, p_now bigint, p_state text) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_until bigint;
BEGIN
    IF p_state = '' THEN
        RETURN false;
    ELSIF p_now < p_state::bigint THEN
        RETURN true;
    END IF;
    SELECT rm.until INTO v_until FROM lonnymq_ready_mark rm WHERE rm.queue = p_queue;
    IF v_until > p_now THEN
        PERFORM pg_catalog.set_config('lonnymq.ready_from_' || pg_catalog.md5(p_queue), v_until::text, false);
        RETURN true;
    END IF;
    RETURN NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_ready_lock_ns_v1(), pg_catalog.hashtext(p_queue));
END
$$;

-- The first p_limit committed wake-up marks of a queue due by p_now, earliest first, read
-- without a lock (lonnymq_dequeue_held_v1's look at the channels being woken). From the
-- queue's index in its order, so it reads p_limit marks whatever the number left; joined to
-- their channel rows before the limit, 89,000 marks took 324 ms. The planner settings keep
-- that plan where the table has no statistics yet (see lonnymq_apply_marks_v1).
CREATE FUNCTION lonnymq_marks_due_v1(p_queue text, p_now bigint, p_limit integer)
RETURNS TABLE (channel_id bigint, dequeue_at bigint)
LANGUAGE sql STABLE
ROWS 100
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT w.channel_id, w.dequeue_at
      FROM lonnymq_wake w
     WHERE w.queue = p_queue AND w.dequeue_at <= p_now
     ORDER BY w.dequeue_at
     LIMIT p_limit
$$;

-- A dequeue that found no due channel it could lock: every due channel is held by another
-- dequeuer (or waiting on one's row made lonnymq_dequeue_v1 give up). The due channels that
-- have no limit (no concurrency cap, no release interval, no token bucket, not paused) are
-- served anyway: their next ready messages are leased through SKIP LOCKED on the message
-- rows alone, without the channel row, so a busy channel has as many dequeuers at once as
-- there are workers. Nothing on such a channel's row depends on one release: its holder still moves
-- its turn (and parks it only after a look at its messages), and the count goes to
-- lonnymq_release_count. Round robin is not at stake: every due channel is being served at
-- this moment (docs/locking.md). The batch is split evenly across the channels in their
-- round-robin order (weights are not at stake either). Never waits.
CREATE FUNCTION lonnymq_dequeue_held_v1(
    p_queue      text,
    p_batch_size integer,
    p_now        bigint,
    p_lease_ms   bigint,
    p_worker     text,
    p_token      uuid
) RETURNS TABLE (
    id bigint, channel text, payload jsonb, attempts integer, max_attempts integer,
    priority smallint, dedup_key text, enqueued_at timestamptz, lease_token uuid, lease_until bigint
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_seen     bigint[];
    v_ch_ids   bigint[];
    v_ch_names text[];
    v_msg_ids  bigint[];
    v_msg_ords bigint[];
    v_share    integer;
    v_state    text;
    v_after    boolean;
    v_after_at bigint[];
    v_after_id bigint[];
    v_read     bigint;
    v_mark_state text;
    v_from     bigint;
BEGIN
    -- Where the scan of the eligible index starts: at the mark of this session's calls of
    -- lonnymq_dequeue_v1 while it holds (the entries in front of it are the versions a held
    -- snapshot keeps), else at the front.
    v_mark_state := coalesce(pg_catalog.current_setting('lonnymq.eligible_from_' || pg_catalog.md5(p_queue), true), '');
    IF v_mark_state <> '' AND p_now < pg_catalog.split_part(v_mark_state, ' ', 1)::bigint THEN
        v_from := pg_catalog.split_part(v_mark_state, ' ', 2)::bigint;
    END IF;
    -- Due channels without limits, in round-robin order, read without a lock: due by their
    -- turn, or by a committed wake-up mark that another dequeuer is applying right now.
    SELECT pg_catalog.array_agg(d.id ORDER BY d.at, d.turn) INTO v_seen
      FROM (SELECT DISTINCT ON (x.id) x.id, x.at, x.turn
              FROM ((SELECT c.id, c.next_dequeue_at AS at, c.turn FROM lonnymq_channel c
                      WHERE c.queue = p_queue
                        AND c.next_dequeue_at <= p_now
                        AND c.next_dequeue_at >= coalesce(v_from, -9223372036854775808)
                        AND c.next_dequeue_at IS NOT NULL
                        AND NOT c.paused
                        AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL
                      ORDER BY c.next_dequeue_at, c.turn
                      LIMIT p_batch_size)
                    UNION ALL
                    (SELECT c.id, m.dequeue_at AS at, c.turn
                       FROM lonnymq_marks_due_v1(p_queue, p_now, p_batch_size) m
                       JOIN lonnymq_channel c ON c.id = m.channel_id
                      WHERE NOT c.paused
                        AND c.max_concurrency IS NULL
                        AND c.release_interval_ms = 0
                        AND c.rate_count IS NULL)) x
             ORDER BY x.id, x.at) d;
    IF v_seen IS NULL THEN
        RETURN;
    END IF;
    -- Say that leases without the row are being taken (a change of the channel's limits
    -- waits for this transaction), then read the limits again in a new statement, whose
    -- snapshot is taken after the lock: a limit set meanwhile is seen, or its change waits.
    -- (Only the limits: a channel's turn says nothing a ready message does not, when it has
    -- no limit.)
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord) INTO v_seen
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
     WHERE pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq_lease_lock_ns_v1(), lonnymq_lock_key_v1(u.id));
    -- Where the candidate scans start: as lonnymq_dequeue_v1's, after the last message a
    -- dequeue took from the channel while this session's scans from the front read many
    -- more entries than they took (the state lonnymq_ready_from_v1 keeps, after a scan from
    -- the front here or there).
    v_state := coalesce(pg_catalog.current_setting('lonnymq.ready_from_' || pg_catalog.md5(p_queue), true), '');
    v_after := v_state <> '' AND (p_now < v_state::bigint OR lonnymq_ready_after_v1(p_queue, p_now, v_state));
    SELECT pg_catalog.array_agg(u.id ORDER BY u.ord), pg_catalog.array_agg(c.name ORDER BY u.ord),
           pg_catalog.array_agg(CASE WHEN v_after THEN c.taken_at END ORDER BY u.ord),
           pg_catalog.array_agg(CASE WHEN v_after THEN c.taken_id END ORDER BY u.ord)
      INTO v_ch_ids, v_ch_names, v_after_at, v_after_id
      FROM pg_catalog.unnest(v_seen) WITH ORDINALITY AS u(id, ord)
      JOIN lonnymq_channel c ON c.id = u.id AND c.id = ANY (v_seen)
     WHERE NOT c.paused
       AND c.max_concurrency IS NULL
       AND c.release_interval_ms = 0
       AND c.rate_count IS NULL;
    IF v_ch_ids IS NULL THEN
        RETURN;
    END IF;
    v_share := pg_catalog.ceil(p_batch_size::numeric / pg_catalog.cardinality(v_ch_ids)::numeric)::integer;
    v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass);

    SELECT pg_catalog.array_agg(x.id ORDER BY x.rank, x.ord), pg_catalog.array_agg(x.ord ORDER BY x.rank, x.ord)
      INTO v_msg_ids, v_msg_ords
      FROM (
        SELECT m.id, m.rank, p.ord
          FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_after_at), pg_catalog.unnest(v_after_id))
               WITH ORDINALITY AS p(channel_id, after_at, after_id, ord)
          CROSS JOIN LATERAL (
              SELECT q.id, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                FROM (SELECT mm.id, mm.dequeue_at
                        FROM lonnymq_message mm
                       WHERE mm.channel_id = p.channel_id
                         AND mm.lease_until IS NULL
                         AND mm.dequeue_at <= p_now
                         AND (mm.dequeue_at, mm.id) > (coalesce(p.after_at, -1), coalesce(p.after_id, -1))
                       ORDER BY mm.dequeue_at, mm.id
                       LIMIT v_share
                         FOR UPDATE OF mm SKIP LOCKED) q
          ) m
         ORDER BY m.rank, p.ord
         LIMIT p_batch_size
      ) x;
    IF NOT v_after THEN
        -- A scan from the front: what it read decides where the next ones start.
        v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass) - v_read;
        IF v_read > 1000 OR v_state <> '' THEN
            PERFORM lonnymq_ready_from_v1(p_queue, p_now, v_read, coalesce(pg_catalog.cardinality(v_msg_ids), 0));
        END IF;
    END IF;
    IF v_msg_ids IS NULL THEN
        RETURN;
    END IF;

    -- Lease them, count them on this backend's own rows (no other running transaction
    -- writes those, so the upsert never waits), and return them in batch order from the
    -- rows the update wrote.
    RETURN QUERY
        WITH leased AS (
            UPDATE lonnymq_message m
               SET lease_until = p_now + p_lease_ms,
                   lease_token = p_token,
                   leased_by = p_worker,
                   attempts = m.attempts + 1,
                   slot_taken = false
             WHERE m.id = ANY (v_msg_ids)
            RETURNING m.id, m.channel_id, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key,
                      m.enqueued_at
        ), counted AS (
            INSERT INTO lonnymq_release_count AS r (channel_id, backend, released)
            SELECT l.channel_id, pg_catalog.pg_backend_pid(), pg_catalog.count(*)
              FROM leased l GROUP BY l.channel_id
            ON CONFLICT (channel_id, backend) DO UPDATE SET released = r.released + excluded.released
        )
        SELECT l.id, v_ch_names[v_msg_ords[o.pos]], l.payload, l.attempts, l.max_attempts, l.priority,
               l.dedup_key, l.enqueued_at, p_token, p_now + p_lease_ms
          FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
          JOIN leased l ON l.id = o.id
         ORDER BY o.pos;
END
$$;

-- Lease up to p_batch_size messages of one queue, round robin across its channels.
-- Picks up to p_batch_size eligible channels (SKIP LOCKED), splits the batch fairly across
-- them (capped by free concurrency slots and rate limits: a release interval releases one,
-- a token bucket as many as it holds tokens), leases each picked channel's first ready
-- messages, and moves every picked channel to its next turn. A channel of weight w takes w
-- messages per round. Rows come back in round-robin order: the first round of each channel
-- in pick order, then the second, and so on. When every due channel is held by another
-- dequeuer, the call leases messages of those without limits without their rows
-- (lonnymq_dequeue_held_v1). A queue with a lonnymq_queue_config row releases no more than
-- its cap's free slots and its bucket's tokens allow, and nothing while it is paused.
CREATE FUNCTION lonnymq_dequeue_v1(
    p_queue        text,
    p_batch_size   integer DEFAULT 1,
    p_lease_ms     bigint  DEFAULT 30000,
    p_worker       text    DEFAULT NULL,
    p_tolerance_ms bigint  DEFAULT 50,
    p_recheck_ms   bigint  DEFAULT 100
) RETURNS TABLE (
    id bigint, channel text, payload jsonb, attempts integer, max_attempts integer,
    priority smallint, dedup_key text, enqueued_at timestamptz, lease_token uuid, lease_until bigint
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_now         bigint;
    v_token       uuid := pg_catalog.gen_random_uuid();
    v_turn_base   bigint;
    v_ch_ids      bigint[];
    v_ch_names    text[];
    v_quotas      integer[];
    v_limited     bigint[];
    v_weights     integer[];
    v_used        integer[];
    v_levels      bigint[];
    v_rounds_first bigint;
    v_weight_sum  bigint;
    v_rounds      bigint;
    v_n           integer;
    v_msg_ids     bigint[];
    v_msg_dqs     bigint[];
    v_msg_ords    bigint[];
    v_msg_rounds  bigint[];
    v_cut_owed    bigint[];
    v_next_ids    bigint[];
    v_next_at     bigint[];
    v_next_last   bigint[];
    v_next_leased integer[];
    v_next_token  bigint[];
    v_next_level  bigint[];
    v_owed        boolean[];
    v_rate_n      integer[];
    v_rate_period bigint[];
    v_lock_timeout text;
    v_intervals   bigint[];
    i             integer;
    v_head        bigint;
    v_floor       bigint;
    v_level       bigint;
    v_batch       integer;
    v_qc          lonnymq_queue_config%ROWTYPE;
    v_q_known     boolean := false;
    v_q_level     bigint;
    v_q_leased    integer;
    v_bursts      integer[];
    v_tokens      bigint[];
    v_msg_costs   bigint[];
    v_next_spent  bigint[];
    v_head_costs  integer[];
    v_keep        integer;
    v_q_spent     bigint;
    v_q_need      bigint := 1;
    v_need        bigint;
    v_holds       bigint[];
    v_buckets     boolean;
    v_caps        integer[];
    v_slot_rooms  integer[];
    v_msg_slots   integer[];
    v_next_slots  integer[];
    v_head_slots  integer[];
    v_q_keep      integer;
    v_q_slot_need integer := 1;
    v_many_slots  boolean;
    v_ch_tids     tid[];
    v_next_tids   tid[];
    v_mark_name   text;
    v_mark_state  text;
    v_mark        bigint;
    v_front_at    bigint;
    v_from        bigint;
    v_read        bigint;
    v_first_at    bigint;
    v_ready_name  text;
    v_ready_state text;
    v_after       boolean;
    v_after_at    bigint[];
    v_after_id    bigint[];
    v_taken_at    bigint[];
    v_taken_id    bigint[];
    v_ready_read  bigint;
    v_shared_at   bigint;
    v_shared_mark bigint;
    v_publish     boolean := false;
    v_unpublish   boolean := false;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'dequeue needs READ COMMITTED, the session runs %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'LQ006';
    END IF;
    IF p_batch_size IS NULL OR p_batch_size NOT BETWEEN 1 AND 10000 THEN
        PERFORM lonnymq_raise_invalid_v1('batch_size', 'must be between 1 and 10000', p_batch_size::text);
    END IF;
    PERFORM lonnymq_check_range_v1('lease', p_lease_ms, 1::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('recheck', p_recheck_ms, 0::bigint, 86400000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    v_batch := p_batch_size;
    -- Where step 1 starts (docs/performance.md, "A held snapshot"). It scans the eligible
    -- index from the front of the queue's range, and while a snapshot holds the horizon back
    -- that front fills with the entries of every channel version written since (each visit
    -- moves the channel's key), which no VACUUM can remove. When this session's last scan
    -- from the front read many more entries than it picked, its next calls start at the
    -- earliest turn that scan picked (the mark), and scan from the front again after a while
    -- (1 ms per 100 entries it read, at most a second) or when the mark finds no channel. A
    -- channel whose turn lies before the mark (a priority's wake-up, a cap's slot given back)
    -- waits for that scan meanwhile; with a clean index every call scans from the front.
    -- A session whose mark is due for that scan shares it with the queue's other sessions
    -- (lonnymq_eligible_mark): it takes the mark another one wrote after its own scan from the
    -- front, while that holds; else the one session that gets the queue's advisory lock scans
    -- and writes what it found, and the others start at their own marks meanwhile. So the
    -- queue's sessions scan from the front about once a second between them, not each.
    v_mark_name := 'lonnymq.eligible_from_' || pg_catalog.md5(p_queue);
    v_mark_state := pg_catalog.current_setting(v_mark_name, true);
    IF v_mark_state IS NOT NULL AND v_mark_state <> '' THEN
        v_front_at := pg_catalog.split_part(v_mark_state, ' ', 1)::bigint;
        v_mark := pg_catalog.split_part(v_mark_state, ' ', 2)::bigint;
        IF v_now >= v_front_at THEN
            SELECT em.front_at, em.mark INTO v_shared_at, v_shared_mark
              FROM lonnymq_eligible_mark em WHERE em.queue = p_queue;
            IF v_shared_at > v_now THEN
                v_front_at := v_shared_at;
                v_mark := greatest(v_mark, v_shared_mark);
            ELSIF NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_mark_lock_ns_v1(), pg_catalog.hashtext(p_queue)) THEN
                -- Another session scans from the front now: this call starts at the mark.
                v_front_at := v_now + 1;
            END IF;
        END IF;
    END IF;
    v_from := CASE WHEN v_now < v_front_at THEN v_mark END;
    -- The same for the ready index, where each channel's range starts with an entry for every
    -- message taken since the snapshot: when this session's last candidate scan from the
    -- front read many more entries than it took, its candidate scans start after the last
    -- message a dequeue took from each channel (taken_at, taken_id), until the time the state
    -- names (lonnymq_ready_from_v1). A message put behind that point meanwhile (a priority, a
    -- lease given back) waits for the next scan from the front, or for the look from the front
    -- of step 4 when the channel has nothing after it; an ordered channel's are always read
    -- from the front (its retried head keeps its place).
    v_ready_name := 'lonnymq.ready_from_' || pg_catalog.md5(p_queue);
    v_ready_state := coalesce(pg_catalog.current_setting(v_ready_name, true), '');
    v_after := v_ready_state <> ''
               AND (v_now < v_ready_state::bigint OR lonnymq_ready_after_v1(p_queue, v_now, v_ready_state));

    -- 1. Pick channels whose turn has come, in round-robin order; skip those another
    --    dequeuer holds. NO KEY UPDATE does not conflict with the KEY SHARE locks that
    --    producers' foreign-key checks hold on the channel row.
    --    SKIP LOCKED does not apply where PostgreSQL follows a channel row's update chain
    --    ("while locking updated version of tuple"): two dequeuers can then wait on each
    --    other until deadlock_timeout (1 s) kills one. A short lock timeout ends that wait
    --    after 20 ms; the call then serves the held channels, as when it finds none free.
    --    room: what the channel's limits let it release now. level: a token bucket's fill
    --    now (in token x period units; one release costs rate_period_ms of them), refilled
    --    at rate_count units per ms since the last release, up to rate_burst tokens.
    v_lock_timeout := pg_catalog.current_setting('lock_timeout');
    PERFORM pg_catalog.set_config('lock_timeout', '20ms', true);
    BEGIN
        -- 0. A queue-wide limit: lock the queue's row (the wait is bounded by the lock
        --    timeout), so concurrent dequeuers of the queue never admit more than it allows.
        --    Without a row this is one index probe. A paused queue releases nothing.
        SELECT * INTO v_qc FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
        v_q_known := true;
        IF v_qc.queue IS NOT NULL THEN
            IF v_qc.paused THEN
                PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
                RETURN;
            END IF;
            IF v_qc.max_concurrency IS NOT NULL THEN
                v_batch := least(v_batch, greatest(v_qc.max_concurrency - v_qc.in_flight, 0));
            END IF;
            IF v_qc.rate_count IS NOT NULL THEN
                v_q_level := CASE WHEN v_qc.bucket_level IS NULL OR v_qc.last_release_at IS NULL
                                  THEN v_qc.rate_burst::bigint * v_qc.rate_period_ms
                                  ELSE least(v_qc.rate_burst::bigint * v_qc.rate_period_ms,
                                             v_qc.bucket_level + least(greatest(v_now - v_qc.last_release_at, 0::bigint),
                                                                       v_qc.rate_burst::bigint * v_qc.rate_period_ms)
                                                               * v_qc.rate_count::bigint) END;
                -- Never refill from a release "after" this call's clock reading.
                v_batch := CASE WHEN v_qc.last_release_at > v_now THEN 0
                                ELSE least(v_batch::bigint, v_q_level / v_qc.rate_period_ms)::integer END;
            END IF;
            IF v_batch < 1 THEN
                PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
                RETURN;
            END IF;
        END IF;
        -- Producers' committed wake-up marks lower their channels' next turn first.
        IF EXISTS (SELECT 1 FROM lonnymq_wake w WHERE w.queue = p_queue) THEN
            PERFORM lonnymq_apply_marks_v1(p_queue, p_tolerance_ms);
        END IF;
        -- The aggregates read the picked rows in the subquery's round-robin order (one sort;
        -- before PostgreSQL 16 every aggregate with its own ORDER BY sorts again).
        LOOP
            v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_channel_eligible_idx'::regclass);
            SELECT pg_catalog.array_agg(p.id), pg_catalog.array_agg(p.ctid), pg_catalog.min(p.next_dequeue_at),
                   pg_catalog.array_agg(p.name),
                   pg_catalog.array_agg(CASE WHEN p.level IS NULL THEN p.room
                                             ELSE least(p.room::bigint, p.level / p.rate_period_ms)::integer END),
                   pg_catalog.array_agg(p.id) FILTER (WHERE p.max_concurrency IS NOT NULL),
                   pg_catalog.array_agg(p.weight),
                   pg_catalog.array_agg(p.round_used),
                   pg_catalog.array_agg(p.level),
                   pg_catalog.array_agg(p.rate_burst),
                   pg_catalog.array_agg(p.level / p.rate_period_ms), pg_catalog.bool_or(p.level IS NOT NULL),
                   pg_catalog.sum(p.weight - p.round_used), pg_catalog.sum(p.weight),
                   pg_catalog.array_agg(p.max_concurrency), pg_catalog.array_agg(p.max_concurrency - p.in_flight),
                   pg_catalog.array_agg(p.after_at), pg_catalog.array_agg(p.after_id)
              INTO v_ch_ids, v_ch_tids, v_first_at, v_ch_names, v_quotas, v_limited, v_weights, v_used, v_levels,
                   v_bursts, v_tokens, v_buckets, v_rounds_first, v_weight_sum, v_caps, v_slot_rooms,
                   v_after_at, v_after_id
              FROM (
                SELECT c.id, c.ctid, c.name, c.next_dequeue_at, c.turn, c.max_concurrency, c.in_flight, c.weight, c.round_used,
                       c.rate_period_ms, c.rate_burst,
                       CASE WHEN v_after AND NOT c.ordered THEN c.taken_at END AS after_at,
                       CASE WHEN v_after AND NOT c.ordered THEN c.taken_id END AS after_id,
                       -- NULL: no limit but the batch. An ordered channel held for a retry or a
                       -- dead message releases nothing (its next turn waits for hold_until).
                       CASE WHEN c.hold_until > v_now THEN 0
                            WHEN c.release_interval_ms > 0 THEN 1
                            WHEN c.max_concurrency IS NOT NULL THEN c.max_concurrency - c.in_flight END AS room,
                       CASE WHEN c.rate_count IS NULL THEN NULL
                            WHEN c.bucket_level IS NULL OR c.last_dequeue_at IS NULL
                            THEN c.rate_burst::bigint * c.rate_period_ms
                            ELSE least(c.rate_burst::bigint * c.rate_period_ms,
                                       c.bucket_level + least(greatest(v_now - c.last_dequeue_at, 0::bigint),
                                                              c.rate_burst::bigint * c.rate_period_ms)
                                                        * c.rate_count::bigint) END AS level
                  FROM lonnymq_channel c
                 WHERE c.queue = p_queue
                   AND c.next_dequeue_at <= v_now
                   AND c.next_dequeue_at >= coalesce(v_from, -9223372036854775808)
                   AND c.next_dequeue_at IS NOT NULL
                   AND NOT c.paused
                   AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
                   -- A bucket refills from its last release: never from a release "after" now
                   -- (another dequeuer's clock read a moment later).
                   AND (c.rate_count IS NULL OR c.last_dequeue_at IS NULL OR c.last_dequeue_at <= v_now)
                 ORDER BY c.next_dequeue_at, c.turn
                 LIMIT v_batch
                   FOR NO KEY UPDATE OF c SKIP LOCKED
              ) p;
            EXIT WHEN v_from IS NULL OR v_ch_ids IS NOT NULL;
            v_from := NULL;  -- nothing from the mark on: from the front
        END LOOP;
        IF v_from IS NULL THEN
            -- A scan from the front: what it read decides where the next calls start. One that
            -- found no channel it could lock (the others' dequeuers hold them) keeps the mark
            -- it had: it read no turn past which to move it, and the entries in front are there.
            v_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_channel_eligible_idx'::regclass) - v_read;
            IF v_ch_ids IS NOT NULL AND v_read > 5000 + 10 * pg_catalog.cardinality(v_ch_ids) THEN
                v_front_at := v_now + least(v_read / 100, 1000);
                v_mark := v_first_at;
                PERFORM pg_catalog.set_config(v_mark_name, v_front_at || ' ' || v_mark, false);
                v_publish := true;
            ELSIF v_ch_ids IS NULL AND v_mark IS NOT NULL AND v_read > 5000 THEN
                PERFORM pg_catalog.set_config(v_mark_name, (v_now + least(v_read / 100, 1000)) || ' ' || v_mark, false);
            ELSIF v_mark_state IS NOT NULL AND v_mark_state <> '' THEN
                PERFORM pg_catalog.set_config(v_mark_name, '', false);
                v_unpublish := v_shared_at IS NOT NULL;
            END IF;
        ELSE
            PERFORM pg_catalog.set_config(v_mark_name, v_front_at || ' ' || v_first_at, false);
        END IF;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        v_ch_ids := NULL;
    END;
    PERFORM pg_catalog.set_config('lock_timeout', v_lock_timeout, true);
    -- What a scan from the front found, for the queue's other sessions: written by the one
    -- that holds the queue's advisory lock (so no writer waits for another), at most once
    -- per such scan; the row goes when a scan from the front reads few entries again.
    IF (v_publish OR v_unpublish)
       AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_mark_lock_ns_v1(), pg_catalog.hashtext(p_queue)) THEN
        IF v_publish THEN
            INSERT INTO lonnymq_eligible_mark AS em (queue, front_at, mark) VALUES (p_queue, v_front_at, v_mark)
                ON CONFLICT (queue) DO UPDATE SET front_at = excluded.front_at, mark = excluded.mark;
        ELSE
            DELETE FROM lonnymq_eligible_mark em WHERE em.queue = p_queue;
        END IF;
    END IF;
    v_n := coalesce(pg_catalog.cardinality(v_ch_ids), 0);
    IF v_n = 0 AND (NOT v_q_known OR v_qc.queue IS NOT NULL) THEN
        -- A queue-wide limit (or a queue row this call could not read in time): no lease
        -- without the queue's count. Its dequeuers take the queue's row in turn, so they
        -- seldom find every channel held.
        RETURN;
    END IF;
    IF v_n = 0 THEN
        -- No due channel we could lock: the others' dequeuers hold them (or none is due).
        -- Those without limits are served without their rows.
        RETURN QUERY
            SELECT h.id, h.channel, h.payload, h.attempts, h.max_attempts, h.priority, h.dedup_key,
                   h.enqueued_at, h.lease_token, h.lease_until
              FROM lonnymq_dequeue_held_v1(p_queue, p_batch_size, v_now, p_lease_ms, p_worker, v_token) h;
        RETURN;
    END IF;

    -- 2. Candidate messages: each picked channel's first ready ones, in rounds: a channel of
    --    weight w takes w per round (fewer in the first round when it is part-way through
    --    one). Enough rounds for a full batch if every channel had a backlog (with weights
    --    1: ceil(batch / channels) each, as a plain round robin), capped by the room. Then
    --    the batch is cut in round-robin order (round, pick order, rank), the order the
    --    aggregates read the subquery in.
    v_rounds := pg_catalog.ceil(greatest(v_batch - v_rounds_first, 0)::numeric / v_weight_sum::numeric)::bigint;
    --    A channel with a token bucket takes messages in order while their costs fit its
    --    tokens (tokens: level / rate_period_ms), each charged at most the bucket's burst, so
    --    a message that costs more than a smaller bucket holds goes once the bucket is full;
    --    a cheaper message never passes a dearer one. When neither the queue nor any channel
    --    picked has a bucket, costs are not read at all: the plain query below.
    --    A capped channel takes messages in order while their slots fit its free ones (each
    --    counted at most its cap, so a message that asks more than a smaller cap runs once
    --    the cap is free); a message that asks fewer never passes one that asks more. The plain
    --    query reads each candidate's slots and the cut by slots follows it, only when one
    --    asks more than one slot.
    IF NOT v_after THEN
        v_ready_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass);
    END IF;
    IF v_buckets OR v_qc.rate_count IS NOT NULL THEN
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
               pg_catalog.array_agg(x.cost), pg_catalog.array_agg(x.slots), pg_catalog.array_agg(x.dequeue_at)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_costs, v_msg_slots, v_msg_dqs
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.cost, m.slots, m.dequeue_at
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used),
                              pg_catalog.unnest(v_tokens), pg_catalog.unnest(v_bursts),
                              pg_catalog.unnest(v_caps), pg_catalog.unnest(v_slot_rooms),
                              pg_catalog.unnest(v_after_at), pg_catalog.unnest(v_after_id))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, tokens, burst, cap, slot_room, after_at,
                                        after_id, ord)
              CROSS JOIN LATERAL (
                  SELECT r.id, r.rank, r.cost, r.slots, r.dequeue_at
                    FROM (SELECT q.id, q.cost, q.slots, q.dequeue_at, pg_catalog.row_number() OVER w AS rank,
                                 pg_catalog.sum(q.cost) OVER w AS spent,
                                 pg_catalog.sum(least(q.slots, p.cap)) OVER w AS taken
                            FROM (SELECT mm.id, mm.dequeue_at, least(mm.cost, coalesce(p.burst, mm.cost))::bigint AS cost,
                                         mm.slots
                                    FROM lonnymq_message mm
                                   WHERE mm.channel_id = p.channel_id
                                     AND mm.lease_until IS NULL
                                     AND mm.dequeue_at <= v_now
                                     AND (mm.dequeue_at, mm.id) > (coalesce(p.after_at, -1), coalesce(p.after_id, -1))
                                   ORDER BY mm.dequeue_at, mm.id
                                   LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                               v_batch::bigint)
                                     FOR UPDATE OF mm SKIP LOCKED) q
                          WINDOW w AS (ORDER BY q.dequeue_at, q.id)) r
                   WHERE (p.tokens IS NULL OR r.spent <= p.tokens) AND (p.cap IS NULL OR r.taken <= p.slot_room)
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
    ELSE
        SELECT pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.ord), pg_catalog.array_agg(x.rnd),
               pg_catalog.array_agg(x.slots), pg_catalog.array_agg(x.dequeue_at)
          INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_slots, v_msg_dqs
          FROM (
            SELECT m.id, m.rank, p.ord, (p.used + m.rank - 1) / p.weight AS rnd, m.slots, m.dequeue_at
              FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_quotas),
                              pg_catalog.unnest(v_weights), pg_catalog.unnest(v_used),
                              pg_catalog.unnest(v_after_at), pg_catalog.unnest(v_after_id))
                   WITH ORDINALITY AS p(channel_id, room, weight, used, after_at, after_id, ord)
              CROSS JOIN LATERAL (
                  SELECT q.id, q.slots, q.dequeue_at, pg_catalog.row_number() OVER (ORDER BY q.dequeue_at, q.id) AS rank
                    FROM (SELECT mm.id, mm.dequeue_at, mm.slots
                            FROM lonnymq_message mm
                           WHERE mm.channel_id = p.channel_id
                             AND mm.lease_until IS NULL
                             AND mm.dequeue_at <= v_now
                             AND (mm.dequeue_at, mm.id) > (coalesce(p.after_at, -1), coalesce(p.after_id, -1))
                           ORDER BY mm.dequeue_at, mm.id
                           LIMIT least(p.room::bigint, (p.weight - p.used)::bigint + v_rounds * p.weight::bigint,
                                       v_batch::bigint)
                             FOR UPDATE OF mm SKIP LOCKED) q
              ) m
             ORDER BY 4, p.ord, m.rank
          ) x;
        IF v_limited IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(v_msg_slots) AS u(n) WHERE u.n > 1) THEN
            -- Each capped channel keeps its candidates while their slots fit (in rank order).
            SELECT pg_catalog.array_agg(k.id ORDER BY k.pos), pg_catalog.array_agg(k.ord ORDER BY k.pos),
                   pg_catalog.array_agg(k.rnd ORDER BY k.pos), pg_catalog.array_agg(k.slots ORDER BY k.pos),
                   pg_catalog.array_agg(k.dq ORDER BY k.pos)
              INTO v_msg_ids, v_msg_ords, v_msg_rounds, v_msg_slots, v_msg_dqs
              FROM (SELECT u.id, u.ord, u.rnd, u.slots, u.dq, u.pos,
                           pg_catalog.sum(least(u.slots, v_caps[u.ord::integer])) OVER (PARTITION BY u.ord ORDER BY u.pos) AS taken
                      FROM ROWS FROM (pg_catalog.unnest(v_msg_ids), pg_catalog.unnest(v_msg_ords),
                                      pg_catalog.unnest(v_msg_rounds), pg_catalog.unnest(v_msg_slots),
                                      pg_catalog.unnest(v_msg_dqs))
                           WITH ORDINALITY AS u(id, ord, rnd, slots, dq, pos)) k
             WHERE v_caps[k.ord::integer] IS NULL OR k.taken <= v_slot_rooms[k.ord::integer];
        END IF;
    END IF;
    IF NOT v_after THEN
        -- A scan from the front: what it read decides where the next ones start.
        v_ready_read := pg_catalog.pg_stat_get_xact_tuples_returned('lonnymq_message_ready_idx'::regclass) - v_ready_read;
        IF v_ready_read > 1000 OR v_ready_state <> '' THEN
            PERFORM lonnymq_ready_from_v1(p_queue, v_now, v_ready_read, coalesce(pg_catalog.cardinality(v_msg_ids), 0));
        END IF;
    END IF;
    -- Cut to the batch, and to what a queue-wide bucket's tokens pay for (in round-robin
    -- order, each message charged at most the queue's burst). The channels whose round the
    -- cut interrupted are owed the rest of it: they keep their place in the rotation (step 4).
    v_keep := least(coalesce(pg_catalog.cardinality(v_msg_ids), 0), v_batch);
    -- A queue-wide cap: what its free slots hold, in round-robin order (each message counted
    -- at most the cap). v_q_slot_need: the slots the first message left out asks (the queue
    -- waits for them: lonnymq_next_due_v1); 1 when none was left out for want of slots.
    IF v_qc.max_concurrency IS NOT NULL AND v_keep > 0 THEN
        SELECT pg_catalog.count(*) FILTER (WHERE s.taken <= v_qc.max_concurrency - v_qc.in_flight),
               coalesce((pg_catalog.array_agg(s.slots ORDER BY s.pos)
                             FILTER (WHERE s.taken > v_qc.max_concurrency - v_qc.in_flight))[1], 1)
          INTO v_q_keep, v_q_slot_need
          FROM (SELECT least(u.slots, v_qc.max_concurrency) AS slots, u.pos,
                       pg_catalog.sum(least(u.slots, v_qc.max_concurrency)) OVER (ORDER BY u.pos) AS taken
                  FROM pg_catalog.unnest(v_msg_slots[1:v_keep]) WITH ORDINALITY AS u(slots, pos)) s;
        v_keep := v_q_keep;
        IF v_keep = 0 AND v_q_slot_need <> v_qc.head_slots THEN
            -- Nothing leased (step 3 writes the queue's row otherwise).
            UPDATE lonnymq_queue_config qc SET head_slots = v_q_slot_need WHERE qc.queue = p_queue;
        END IF;
    END IF;
    IF v_qc.rate_count IS NOT NULL AND v_keep > 0 THEN
        -- v_q_need: the tokens the first message left out needs (the queue's next token waits for them).
        SELECT pg_catalog.count(*) FILTER (WHERE s.spent <= v_q_level / v_qc.rate_period_ms),
               coalesce((pg_catalog.array_agg(s.cost ORDER BY s.pos)
                             FILTER (WHERE s.spent > v_q_level / v_qc.rate_period_ms))[1], 1)
          INTO v_keep, v_q_need
          FROM (SELECT least(u.cost, v_qc.rate_burst::bigint) AS cost, u.pos,
                       pg_catalog.sum(least(u.cost, v_qc.rate_burst::bigint)) OVER (ORDER BY u.pos) AS spent
                  FROM pg_catalog.unnest(v_msg_costs[1:v_keep]) WITH ORDINALITY AS u(cost, pos)) s;
        IF v_keep = 0 THEN
            -- Not one message fits the queue's tokens: its next token waits for the first one's cost.
            UPDATE lonnymq_queue_config qc
               SET next_token_at = v_now + (v_q_need * qc.rate_period_ms - v_q_level + qc.rate_count - 1) / qc.rate_count
             WHERE qc.queue = p_queue;
        END IF;
    END IF;
    IF coalesce(pg_catalog.cardinality(v_msg_ids), 0) > v_keep THEN
        SELECT pg_catalog.array_agg(DISTINCT o.ord) INTO v_cut_owed
          FROM ROWS FROM (pg_catalog.unnest(v_msg_ords), pg_catalog.unnest(v_msg_rounds)) WITH ORDINALITY AS o(ord, rnd, pos)
         WHERE o.pos > v_keep AND (v_keep = 0 OR o.rnd = v_msg_rounds[v_keep]);
        v_msg_ids := CASE WHEN v_keep > 0 THEN v_msg_ids[1:v_keep] END;
        v_msg_ords := CASE WHEN v_keep > 0 THEN v_msg_ords[1:v_keep] END;
        v_msg_costs := CASE WHEN v_keep > 0 THEN v_msg_costs[1:v_keep] END;
        v_msg_slots := CASE WHEN v_keep > 0 THEN v_msg_slots[1:v_keep] END;
        v_msg_dqs := CASE WHEN v_keep > 0 THEN v_msg_dqs[1:v_keep] END;
    END IF;

    -- 3. Lease them (matched by id array: a join here is planned as a full scan), and add
    --    them to the result, in batch order, from the rows the update wrote: reading them
    --    again afterwards cost a fifth of the call. RETURN QUERY does not end the call.
    IF v_msg_ids IS NOT NULL THEN
        RETURN QUERY
            WITH leased AS (
                UPDATE lonnymq_message m
                   SET lease_until = v_now + p_lease_ms,
                       lease_token = v_token,
                       leased_by = p_worker,
                       attempts = m.attempts + 1,
                       slot_taken = (v_limited IS NOT NULL AND m.channel_id = ANY (v_limited)),
                       queue_slot = (v_qc.max_concurrency IS NOT NULL)
                 WHERE m.id = ANY (v_msg_ids)
                RETURNING m.id, m.payload, m.attempts, m.max_attempts, m.priority, m.dedup_key, m.enqueued_at
            )
            SELECT l.id, v_ch_names[v_msg_ords[o.pos]], l.payload, l.attempts, l.max_attempts, l.priority,
                   l.dedup_key, l.enqueued_at, v_token, v_now + p_lease_ms
              FROM pg_catalog.unnest(v_msg_ids) WITH ORDINALITY AS o(id, pos)
              JOIN leased l ON l.id = o.id
             ORDER BY o.pos;
        -- The queue's counters, in the row this call has held since step 0.
        IF v_qc.queue IS NOT NULL THEN
            SELECT pg_catalog.sum(u.slots) INTO v_q_leased FROM pg_catalog.unnest(v_msg_slots) AS u(slots);
            SELECT pg_catalog.sum(least(u.cost, coalesce(v_qc.rate_burst, 1000000)::bigint)) INTO v_q_spent
              FROM pg_catalog.unnest(v_msg_costs) AS u(cost);
            v_q_level := v_q_level - v_q_spent * v_qc.rate_period_ms;
            UPDATE lonnymq_queue_config qc
               SET in_flight = qc.in_flight + CASE WHEN qc.max_concurrency IS NOT NULL THEN v_q_leased ELSE 0 END,
                   head_slots = v_q_slot_need,
                   bucket_level = v_q_level,
                   last_release_at = v_now,
                   next_token_at = CASE WHEN v_q_level IS NULL THEN NULL
                                        WHEN v_q_level >= v_q_need * qc.rate_period_ms THEN v_now
                                        ELSE v_now + (v_q_need * qc.rate_period_ms - v_q_level + qc.rate_count - 1)
                                                     / qc.rate_count END
             WHERE qc.queue = p_queue;
        END IF;
    END IF;

    -- 4. Each picked channel's next turn: its next ready message, no earlier than now plus
    --    its release interval when it released something, nor before its bucket's next token.
    --    Leased per channel comes from step 2's pick ordinals: probing the message table
    --    with the id array once per channel cost 100 x 100 index probes per call.
    --    The aggregates read the rows in the subquery's pick order (one sort).
    --    A capped channel's slots are its leases' count unless one took more than one.
    v_many_slots := v_limited IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(v_msg_slots) AS u(n) WHERE u.n > 1);
    SELECT pg_catalog.array_agg(n.channel_id), pg_catalog.array_agg(n.tid), pg_catalog.array_agg(n.head),
           pg_catalog.array_agg(n.last_floor), pg_catalog.array_agg(n.leased), pg_catalog.array_agg(n.release_interval_ms),
           pg_catalog.array_agg(n.next_token_at), pg_catalog.array_agg(n.rate_count),
           pg_catalog.array_agg(n.rate_period_ms), pg_catalog.array_agg(n.spent), pg_catalog.array_agg(n.head_cost),
           pg_catalog.array_agg(n.hold_until), pg_catalog.array_agg(n.slots_taken), pg_catalog.array_agg(n.head_slots),
           pg_catalog.array_agg(n.taken_at), pg_catalog.array_agg(n.taken_id)
      INTO v_next_ids, v_next_tids, v_next_at, v_next_last, v_next_leased, v_intervals, v_next_token, v_rate_n,
           v_rate_period, v_next_spent, v_head_costs, v_holds, v_next_slots, v_head_slots, v_taken_at, v_taken_id
      FROM (
        SELECT p.channel_id, p.tid, h.dequeue_at AS head, c.last_dequeue_at + c.release_interval_ms AS last_floor,
               l.n AS leased,
               -- The last message it leased here (written as taken_at, taken_id), or what it had.
               coalesce(v_msg_dqs[l.at], c.taken_at) AS taken_at,
               CASE WHEN l.at IS NULL THEN c.taken_id ELSE v_msg_ids[l.at] END AS taken_id,
               c.release_interval_ms, c.next_token_at, c.rate_count, c.rate_period_ms,
               -- The tokens its leases took (a bucket's channel only), and its next head's cost.
               CASE WHEN c.rate_count IS NOT NULL
                    THEN (SELECT coalesce(pg_catalog.sum(v_msg_costs[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) END AS spent,
               h.cost AS head_cost, c.hold_until,
               -- The slots its leases took (a capped channel only), and its next head's.
               CASE WHEN c.max_concurrency IS NULL THEN 0
                    WHEN NOT v_many_slots THEN l.n
                    ELSE (SELECT coalesce(pg_catalog.sum(v_msg_slots[k.at]), 0)
                            FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)) END
                   AS slots_taken,
               coalesce(h.slots, 1) AS head_slots
          FROM ROWS FROM (pg_catalog.unnest(v_ch_ids), pg_catalog.unnest(v_ch_tids)) WITH ORDINALITY AS p(channel_id, tid, ord)
          -- The row versions step 1 locked, by their tids: a lookup by id reads every version
          -- of the row in the primary key, which a held snapshot keeps ("= ANY" gives the
          -- planner a tid scan; a plain join to unnest() is planned as a hash join over a
          -- sequential scan of every channel).
          JOIN lonnymq_channel c ON c.ctid = p.tid AND c.ctid = ANY (v_ch_tids) AND c.id = p.channel_id
          -- l: how many it leased here, and the last one's position in the batch. Its next
          -- ready message starts after that one (or where step 2 started, when it leased
          -- none), not at the front of its range in the ready index,
          -- where a held snapshot keeps an entry for every message taken since. What it cannot
          -- see there (a message put back or enqueued behind them since step 2, one another
          -- session held locked) only ever makes the head later: by at most the tolerance, or
          -- far enough to park the channel or move it ahead, which looks again from the front
          -- below, under the channel's lock.
          CROSS JOIN LATERAL (
              SELECT pg_catalog.count(*)::integer AS n, pg_catalog.max(k.at) AS at
                FROM pg_catalog.unnest(pg_catalog.array_positions(v_msg_ords, p.ord)) AS k(at)
          ) l
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at, mm.cost, mm.slots FROM lonnymq_message mm
               WHERE mm.channel_id = p.channel_id AND mm.lease_until IS NULL
                 AND (mm.dequeue_at, mm.id) > (coalesce(v_msg_dqs[l.at], v_after_at[p.ord], -1),
                                               coalesce(v_msg_ids[l.at], v_after_id[p.ord], -1))
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         ORDER BY p.ord
      ) n;
    v_owed := pg_catalog.array_fill(false, ARRAY[v_n]);
    v_next_level := v_levels;

    FOR i IN 1 .. v_n LOOP
        -- A token bucket that released: its fill after these releases. When it released, or
        -- when its tokens do not pay for its next head's cost, its next token is due when
        -- they do (the channel's next turn is no earlier): a message that costs 10 waits
        -- for 10 tokens, not 1.
        IF v_levels[i] IS NOT NULL THEN
            v_level := v_levels[i] - v_next_spent[i] * v_rate_period[i];
            v_need := least(coalesce(v_head_costs[i], 1), v_bursts[i])::bigint * v_rate_period[i];
            IF v_next_leased[i] > 0 OR v_level < v_need THEN
                v_next_level[i] := v_level;
                v_next_token[i] := CASE WHEN v_level >= v_need THEN v_now
                                        ELSE v_now + (v_need - v_level + v_rate_n[i] - 1) / v_rate_n[i] END;
            END IF;
        END IF;
        IF v_next_leased[i] > 0 THEN
            v_floor := v_now + v_intervals[i];
        ELSE
            v_floor := greatest(v_now, coalesce(v_next_last[i], v_now));
        END IF;
        v_floor := greatest(v_floor, v_next_token[i], v_holds[i]);
        v_head := v_next_at[i];
        IF (v_cut_owed IS NOT NULL OR v_weight_sum > v_n) AND v_head <= v_now AND v_floor <= v_now
           AND (v_quotas[i] IS NULL OR v_next_leased[i] < v_quotas[i])
           AND ((v_next_leased[i] > 0 AND (v_used[i] + v_next_leased[i]) % v_weights[i] <> 0)
                OR i = ANY (v_cut_owed)) THEN
            -- Owed the rest of its round (weighted, or cut off by the batch): it keeps its
            -- place, so the next dequeue serves it first.
            v_owed[i] := true;
        ELSIF v_head IS NULL OR greatest(v_head, v_floor) > v_floor + p_tolerance_ms THEN
            -- Parking the channel, or moving it far ahead: only when no enqueue into it is
            -- in flight, and only after a second look with a snapshot taken after the lock.
            IF pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_next_ids[i]))
               AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_stripe_lock_ns_v1(),
                                                        lonnymq_stripe_key_v1(v_next_ids[i])) THEN
                SELECT mm.dequeue_at INTO v_head FROM lonnymq_message mm
                 WHERE mm.channel_id = v_next_ids[i] AND mm.lease_until IS NULL
                 ORDER BY mm.dequeue_at, mm.id LIMIT 1;
                IF NOT FOUND THEN
                    v_head := NULL;
                ELSIF v_next_leased[i] = 0 THEN
                    -- Its head may lie before where step 2 started (a lease given back): the
                    -- next candidate scan starts at the front.
                    v_taken_at[i] := NULL;
                    v_taken_id[i] := NULL;
                END IF;
                v_next_at[i] := CASE WHEN v_head IS NULL THEN NULL ELSE greatest(v_head, v_floor) END;
            ELSE
                v_next_at[i] := least(coalesce(greatest(v_head, v_floor), v_now + p_recheck_ms), v_now + p_recheck_ms);
            END IF;
        ELSE
            v_next_at[i] := greatest(v_head, v_floor);
        END IF;
    END LOOP;

    -- 5. Write the picked channels. An owed channel keeps its turn and counts the releases
    --    of its round; every other one goes to the back and starts a new round.
    v_turn_base := pg_catalog.nextval('lonnymq_turn_seq') * 100000;
    UPDATE lonnymq_channel c
       SET next_dequeue_at = CASE WHEN u.owed THEN c.next_dequeue_at ELSE u.next_at END,
           turn = CASE WHEN u.owed THEN c.turn ELSE v_turn_base + u.ord END,
           round_used = CASE WHEN u.owed THEN (c.round_used + u.leased) % c.weight ELSE 0 END,
           last_dequeue_at = CASE WHEN u.leased > 0 THEN v_now ELSE c.last_dequeue_at END,
           released_total = c.released_total + u.leased,
           in_flight = c.in_flight + u.slots_taken,
           head_slots = u.head_slots,
           bucket_level = CASE WHEN u.leased > 0 THEN u.level ELSE c.bucket_level END,
           next_token_at = u.token_at,
           taken_at = u.taken_at,
           taken_id = u.taken_id
      FROM ROWS FROM (pg_catalog.unnest(v_next_ids), pg_catalog.unnest(v_next_at), pg_catalog.unnest(v_next_leased),
                      pg_catalog.unnest(v_owed), pg_catalog.unnest(v_next_level), pg_catalog.unnest(v_next_token),
                      pg_catalog.unnest(v_next_slots), pg_catalog.unnest(v_head_slots), pg_catalog.unnest(v_next_tids),
                      pg_catalog.unnest(v_taken_at), pg_catalog.unnest(v_taken_id))
           WITH ORDINALITY AS u(channel_id, next_at, leased, owed, level, token_at, slots_taken, head_slots, tid,
                                taken_at, taken_id, ord)
     WHERE c.ctid = u.tid AND c.ctid = ANY (v_next_tids) AND c.id = u.channel_id;
END
$$;

-- The earliest time any eligible channel of these queues may release (NULL: none queued).
-- Idle workers sleep until then, or until a notification wakes them. A queue at its
-- queue-wide cap has no such time (an ack that gives a slot back notifies), nor has a paused
-- queue (resuming notifies); a queue-wide bucket's next token comes first.
CREATE FUNCTION lonnymq_next_due_v1(p_queues text[]) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
SET jit = off
AS $$
    SELECT pg_catalog.min(greatest(x.at, qc.next_token_at)) FROM pg_catalog.unnest(p_queues) AS q(name)
    LEFT JOIN lonnymq_queue_config qc ON qc.queue = q.name
    -- The mark of this session's dequeues of the queue while it holds (lonnymq_dequeue_v1):
    -- the earliest turn is looked for from there first, past the entries a held snapshot
    -- keeps in front of it, and from the front when there is none from there.
    CROSS JOIN LATERAL (
        SELECT CASE WHEN pg_catalog.split_part(s.state, ' ', 1)::bigint > lonnymq_now_ms_v1()
                    THEN pg_catalog.split_part(s.state, ' ', 2)::bigint END AS mark
          FROM (SELECT NULLIF(pg_catalog.current_setting('lonnymq.eligible_from_' || pg_catalog.md5(q.name), true), '')
                       AS state) s
    ) mk
    CROSS JOIN LATERAL (
        SELECT coalesce(
            (SELECT c.next_dequeue_at FROM lonnymq_channel c
              WHERE c.queue = q.name
                AND c.next_dequeue_at >= mk.mark
                AND NOT c.paused
                AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
              ORDER BY c.next_dequeue_at LIMIT 1),
            (SELECT c.next_dequeue_at FROM lonnymq_channel c
              WHERE c.queue = q.name
                AND c.next_dequeue_at IS NOT NULL
                AND NOT c.paused
                AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
              ORDER BY c.next_dequeue_at LIMIT 1)) AS at
        UNION ALL
        -- A producer's committed mark: the next dequeue applies it.
        (SELECT w.dequeue_at FROM lonnymq_wake w WHERE w.queue = q.name ORDER BY w.dequeue_at LIMIT 1)
    ) x
    WHERE (qc.max_concurrency IS NULL OR qc.in_flight + least(qc.head_slots, qc.max_concurrency) <= qc.max_concurrency)
      AND qc.paused IS NOT TRUE
$$;

-- ---------------------------------------------------------------------------------------
-- Giving leases back: ack, fail, retry, release, reap
-- ---------------------------------------------------------------------------------------

-- Give back the concurrency slots of leases that took one (p_channel_ids: each lease's
-- channel, p_slots: the slots it took), locking channels in id order. Notifies when a channel
-- that had no room for the slots of its next message (head_slots) has it again.
CREATE FUNCTION lonnymq_give_back_slots_v2(p_channel_ids bigint[], p_slots integer[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_queue text;
BEGIN
    -- The rows are locked in id order first, as every writer of several channel rows does, and
    -- then written by one statement: one update per channel was most of a capped ack's time.
    PERFORM c.id FROM lonnymq_channel c WHERE c.id = ANY (p_channel_ids) ORDER BY c.id FOR NO KEY UPDATE;
    FOR v_queue IN
        WITH given AS (
            SELECT u.channel_id, pg_catalog.sum(u.slots)::integer AS n
              FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_slots)) AS u(channel_id, slots)
             GROUP BY u.channel_id
        ), given_back AS (
            UPDATE lonnymq_channel c SET in_flight = greatest(c.in_flight - g.n, 0)
              FROM given g
             WHERE c.id = g.channel_id AND c.id = ANY (p_channel_ids)
            RETURNING c.queue,
                      c.max_concurrency IS NOT NULL
                      AND c.in_flight + g.n + least(c.head_slots, c.max_concurrency) > c.max_concurrency
                      AND c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency
                      AND c.next_dequeue_at IS NOT NULL AND NOT c.paused AS reopened
        )
        SELECT DISTINCT b.queue FROM given_back b WHERE b.reopened
    LOOP
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_queue);
    END LOOP;
END
$$;

-- Give back the queue-wide slots of leases that took one (p_channel_ids: the channel of each
-- such lease, p_slots: the slots it took), one queue row at a time in name order. Notifies
-- when a queue that had no room for its next message's slots has it again. Callers hold these
-- leases' message rows (and have given back their channel slots): queue rows are always the
-- last rows a call locks.
CREATE FUNCTION lonnymq_give_back_queue_slots_v2(p_channel_ids bigint[], p_slots integer[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_row    record;
    v_reopen boolean;
BEGIN
    FOR v_row IN
        SELECT c.queue, pg_catalog.sum(u.slots)::integer AS n
          FROM ROWS FROM (pg_catalog.unnest(p_channel_ids), pg_catalog.unnest(p_slots)) AS u(channel_id, slots)
          JOIN lonnymq_channel c ON c.id = u.channel_id AND c.id = ANY (p_channel_ids)
         GROUP BY c.queue ORDER BY c.queue
    LOOP
        UPDATE lonnymq_queue_config qc SET in_flight = greatest(qc.in_flight - v_row.n, 0)
         WHERE qc.queue = v_row.queue AND qc.max_concurrency IS NOT NULL
        RETURNING qc.in_flight + v_row.n + least(qc.head_slots, qc.max_concurrency) > qc.max_concurrency
                  AND qc.in_flight + least(qc.head_slots, qc.max_concurrency) <= qc.max_concurrency
             INTO v_reopen;
        IF v_reopen THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
    END LOOP;
END
$$;

-- Acknowledge processed messages: delete them. Returns the ids acked; an id missing from the
-- result had a stale token (its lease expired and was taken over) or no longer exists.
CREATE FUNCTION lonnymq_ack_v1(p_ids bigint[], p_tokens uuid[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_acked bigint[];
    v_slots bigint[];
    v_slot_counts integer[];
    v_queue_slots bigint[];
    v_queue_slot_counts integer[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    IF coalesce(pg_catalog.cardinality(p_ids), 0) <> coalesce(pg_catalog.cardinality(p_tokens), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must have one token per id', pg_catalog.cardinality(p_tokens)::text);
    END IF;
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (p_ids)
           AND (m.id, m.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
        RETURNING m.id, m.channel_id, m.slot_taken, m.queue_slot, m.slots
    )
    SELECT coalesce(pg_catalog.array_agg(g.id), ARRAY[]::bigint[]), pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.slots) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.queue_slot), pg_catalog.array_agg(g.slots) FILTER (WHERE g.queue_slot)
      INTO v_acked, v_slots, v_slot_counts, v_queue_slots, v_queue_slot_counts FROM gone g;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v2(v_slots, v_slot_counts);
    END IF;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v2(v_queue_slots, v_queue_slot_counts);
    END IF;
    RETURN v_acked;
END
$$;

-- Extend leases (heartbeat) and tell which of them someone asked to cancel. Returns a row per
-- id extended; a missing id lost its lease.
CREATE FUNCTION lonnymq_extend_v2(p_ids bigint[], p_tokens uuid[], p_lease_ms bigint)
RETURNS TABLE (id bigint, cancel_requested boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    PERFORM lonnymq_check_range_v1('lease', p_lease_ms, 1::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    IF coalesce(pg_catalog.cardinality(p_ids), 0) <> coalesce(pg_catalog.cardinality(p_tokens), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must have one token per id', pg_catalog.cardinality(p_tokens)::text);
    END IF;
    RETURN QUERY
        UPDATE lonnymq_message m SET lease_until = lonnymq_now_ms_v1() + p_lease_ms
         WHERE m.id = ANY (p_ids)
           AND (m.id, m.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
        RETURNING m.id, m.cancel_requested;
END
$$;

-- Move locked, leased messages to the dead-letter table and give their slots back. A message
-- someone asked to cancel is buried as 'cancelled' whatever ended it, unless it was discarded.
CREATE FUNCTION lonnymq_bury_v1(p_ids bigint[], p_reason text, p_error text) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_slots bigint[];
    v_slot_counts integer[];
    v_queue_slots bigint[];
    v_queue_slot_counts integer[];
    v_n integer;
    v_channels bigint[];
    v_dead bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM lonnymq_message m WHERE m.id = ANY (p_ids)
        RETURNING m.*
    ), dead AS (
        INSERT INTO lonnymq_dead_message (id, channel_id, queue, channel, payload, priority, attempts,
                                          max_attempts, dedup_key, enqueued_at, reason, last_error, snoozes, cost,
                                          slots)
        SELECT g.id, g.channel_id, c.queue, c.name, g.payload, g.priority, g.attempts, g.max_attempts,
               g.dedup_key, g.enqueued_at,
               CASE WHEN g.cancel_requested AND p_reason <> 'discarded' THEN 'cancelled' ELSE p_reason END,
               coalesce(p_error, g.last_error), g.snoozes, g.cost, g.slots
          FROM gone g JOIN lonnymq_channel c ON c.id = g.channel_id
        RETURNING 1
    )
    SELECT pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.slot_taken), pg_catalog.array_agg(g.slots) FILTER (WHERE g.slot_taken),
           pg_catalog.array_agg(g.channel_id) FILTER (WHERE g.queue_slot), pg_catalog.array_agg(g.slots) FILTER (WHERE g.queue_slot),
           (SELECT pg_catalog.count(*) FROM dead),
           pg_catalog.array_agg(g.channel_id ORDER BY g.id), pg_catalog.array_agg(g.id ORDER BY g.id)
      INTO v_slots, v_slot_counts, v_queue_slots, v_queue_slot_counts, v_n, v_channels, v_dead FROM gone g;
    -- Strict order: a dead message blocks its ordered channel (the first one to die names
    -- it) until it is requeued or skipped. The channel rows are locked in id order first.
    IF EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = ANY (v_channels) AND c.ordered) THEN
        PERFORM 1 FROM lonnymq_channel c WHERE c.id = ANY (v_channels) ORDER BY c.id FOR NO KEY UPDATE;
        UPDATE lonnymq_channel c
           SET hold_until = 253402300799999, blocked_by = coalesce(c.blocked_by, b.id)
          FROM (SELECT u.channel_id, pg_catalog.min(u.id) AS id
                  FROM ROWS FROM (pg_catalog.unnest(v_channels), pg_catalog.unnest(v_dead)) AS u(channel_id, id)
                 GROUP BY u.channel_id) b
         WHERE c.id = b.channel_id AND c.id = ANY (v_channels) AND c.ordered;
    END IF;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v2(v_slots, v_slot_counts);
    END IF;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v2(v_queue_slots, v_queue_slot_counts);
    END IF;
    RETURN coalesce(v_n, 0);
END
$$;

-- Put locked, leased messages back as ready at their new dequeue_at, give their slots back
-- and wake their channels (taking each channel's shared advisory lock, like an enqueue).
-- A message someone asked to cancel is buried as 'cancelled' instead: it never runs again.
-- A message of an ordered channel keeps its place (its dequeue_at) and holds its channel
-- until the new time instead (hold_until), so nothing after it runs meanwhile.
CREATE FUNCTION lonnymq_unlease_v1(
    p_ids bigint[], p_dequeue_ats bigint[], p_error text, p_uncount boolean, p_tolerance_ms bigint
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_slots     bigint[];
    v_slot_counts integer[];
    v_queue_slots bigint[];
    v_queue_slot_counts integer[];
    v_cancelled bigint[];
    v_ch        record;
    v_ordered   bigint[];
BEGIN
    -- Lock every channel row this call may touch, in id order, before touching any: giving
    -- slots back and waking channels must not take them in two different orders.
    SELECT pg_catalog.array_agg(l.id) FILTER (WHERE l.ordered) INTO v_ordered
      FROM (SELECT c.id, c.ordered FROM lonnymq_channel c
             WHERE c.id IN (SELECT m.channel_id FROM lonnymq_message m WHERE m.id = ANY (p_ids))
             ORDER BY c.id FOR NO KEY UPDATE) l;
    SELECT pg_catalog.array_agg(m.id) INTO v_cancelled
      FROM lonnymq_message m WHERE m.id = ANY (p_ids) AND m.cancel_requested;
    IF v_cancelled IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_cancelled, 'cancelled', p_error);
    END IF;
    SELECT pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.slot_taken), pg_catalog.array_agg(m.slots) FILTER (WHERE m.slot_taken),
           pg_catalog.array_agg(m.channel_id) FILTER (WHERE m.queue_slot), pg_catalog.array_agg(m.slots) FILTER (WHERE m.queue_slot)
      INTO v_slots, v_slot_counts, v_queue_slots, v_queue_slot_counts
      FROM lonnymq_message m WHERE m.id = ANY (p_ids);
    IF v_ordered IS NOT NULL THEN
        -- Strict order: the channel waits until the latest new time of its messages here
        -- (a release's own time, which is past, holds nothing), and they keep their place.
        UPDATE lonnymq_channel c
           SET hold_until = CASE WHEN h.until > lonnymq_now_ms_v1() THEN h.until END
          FROM (SELECT m.channel_id, pg_catalog.max(u.dequeue_at) AS until
                  FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
                  JOIN lonnymq_message m ON m.id = u.id AND m.id = ANY (p_ids)
                 WHERE m.channel_id = ANY (v_ordered) AND m.lease_until IS NOT NULL
                 GROUP BY m.channel_id) h
         WHERE c.id = h.channel_id AND c.blocked_by IS NULL;
    END IF;
    UPDATE lonnymq_message m
       SET lease_until = NULL, lease_token = NULL, leased_by = NULL, slot_taken = false, queue_slot = false,
           dequeue_at = CASE WHEN v_ordered IS NOT NULL AND m.channel_id = ANY (v_ordered)
                             THEN least(m.dequeue_at, u.dequeue_at) ELSE u.dequeue_at END,
           attempts = CASE WHEN p_uncount THEN greatest(m.attempts - 1, 0) ELSE m.attempts END,
           last_error = coalesce(p_error, m.last_error)
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_dequeue_ats)) AS u(id, dequeue_at)
     WHERE m.id = ANY (p_ids) AND m.id = u.id;
    IF v_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_slots_v2(v_slots, v_slot_counts);
    END IF;
    FOR v_ch IN
        SELECT m.channel_id, greatest(pg_catalog.min(m.dequeue_at), pg_catalog.max(c.hold_until)) AS dequeue_at,
               pg_catalog.min(c.queue) AS queue
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.id = ANY (p_ids)
         GROUP BY m.channel_id ORDER BY m.channel_id
    LOOP
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(v_ch.channel_id));
        IF lonnymq_wake_v1(v_ch.channel_id, v_ch.dequeue_at, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_ch.queue);
        END IF;
    END LOOP;
    IF v_queue_slots IS NOT NULL THEN
        PERFORM lonnymq_give_back_queue_slots_v2(v_queue_slots, v_queue_slot_counts);
    END IF;
END
$$;

-- A handler failed, timed out, was cancelled, asked for a retry or to discard its message.
-- p_reason: 'failed' and 'timeout' retry with exponential backoff and jitter (or after
-- p_retry_delay_ms when given) until the attempts are used up, then dead-letter with that
-- reason; 'discarded' and 'cancelled' dead-letter at once. A message someone asked to
-- cancel is dead-lettered as 'cancelled' whatever the reason (unless discarded).
-- Returns 'retry' or 'dead'.
CREATE FUNCTION lonnymq_fail_v2(
    p_id               bigint,
    p_token            uuid,
    p_error            text    DEFAULT NULL,
    p_retry_delay_ms   bigint  DEFAULT NULL,
    p_reason           text    DEFAULT 'failed',
    p_backoff_base_ms  bigint  DEFAULT 1000,
    p_backoff_max_ms   bigint  DEFAULT 3600000,
    p_tolerance_ms     bigint  DEFAULT 50
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_msg   record;
    v_delay bigint;
BEGIN
    IF p_reason IS NULL OR p_reason NOT IN ('failed', 'timeout', 'discarded', 'cancelled') THEN
        PERFORM lonnymq_raise_invalid_v1('reason', 'must be failed, timeout, discarded or cancelled',
                                         pg_catalog.quote_nullable(p_reason));
    END IF;
    PERFORM lonnymq_check_range_v1('retry_delay', p_retry_delay_ms, 0::bigint, 3155760000000::bigint, true);
    PERFORM lonnymq_check_range_v1('backoff_base', p_backoff_base_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('backoff_max', p_backoff_max_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT m.id, m.attempts, m.max_attempts, m.lease_token, m.cancel_requested INTO v_msg
      FROM lonnymq_message m WHERE m.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id
            USING ERRCODE = 'LQ004';
    END IF;
    IF v_msg.lease_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    IF p_reason IN ('discarded', 'cancelled') OR v_msg.cancel_requested OR v_msg.attempts >= v_msg.max_attempts THEN
        PERFORM lonnymq_bury_v1(ARRAY[p_id], p_reason, p_error);
        RETURN 'dead';
    END IF;
    IF p_retry_delay_ms IS NOT NULL THEN
        v_delay := p_retry_delay_ms;
    ELSE
        -- Equal jitter: half the exponential step for sure, the other half at random.
        -- In double precision: base * 2^40 would overflow bigint before least() caps it.
        v_delay := least(p_backoff_max_ms::double precision,
                         p_backoff_base_ms::double precision
                         * pg_catalog.power(2::double precision, least(v_msg.attempts - 1, 40)::double precision))::bigint;
        v_delay := v_delay / 2 + (pg_catalog.random() * (v_delay / 2)::double precision)::bigint;
    END IF;
    PERFORM lonnymq_unlease_v1(ARRAY[p_id], ARRAY[lonnymq_now_ms_v1() + v_delay], p_error, false, p_tolerance_ms);
    RETURN 'retry';
END
$$;

-- A handler asked to wait p_delay_ms (Snooze) without spending an attempt: the message goes
-- back exactly as a retry does (lonnymq_unlease_v1: channel and queue-wide slots given back,
-- the channel woken for the new dequeue_at, so the scheduler's invariants hold), with the
-- attempt its lease counted taken back and its snoozes counted. Past p_max_snoozes the
-- snooze is a failed attempt instead (lonnymq_fail_v2 with 'snoozed more than N times':
-- a retry with backoff, or dead when the attempts are used up). A message someone asked to
-- cancel is dead-lettered as 'cancelled'. Returns 'snoozed', 'retry' or 'dead'.
CREATE FUNCTION lonnymq_snooze_v1(
    p_id               bigint,
    p_token            uuid,
    p_delay_ms         bigint,
    p_max_snoozes      integer,
    p_backoff_base_ms  bigint  DEFAULT 1000,
    p_backoff_max_ms   bigint  DEFAULT 3600000,
    p_tolerance_ms     bigint  DEFAULT 50
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_msg record;
BEGIN
    PERFORM lonnymq_check_range_v1('delay', p_delay_ms, 0::bigint, 3155760000000::bigint, false);
    PERFORM lonnymq_check_range_v1('max_snoozes', p_max_snoozes::bigint, 0::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('backoff_base', p_backoff_base_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('backoff_max', p_backoff_max_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT m.id, m.snoozes, m.lease_token, m.cancel_requested INTO v_msg
      FROM lonnymq_message m WHERE m.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id
            USING ERRCODE = 'LQ004';
    END IF;
    IF v_msg.lease_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    IF v_msg.cancel_requested THEN
        RETURN lonnymq_fail_v2(p_id, p_token, NULL, NULL, 'cancelled', p_backoff_base_ms, p_backoff_max_ms,
                               p_tolerance_ms);
    END IF;
    IF v_msg.snoozes >= p_max_snoozes THEN
        RETURN lonnymq_fail_v2(p_id, p_token, pg_catalog.format('snoozed more than %s times', p_max_snoozes),
                               NULL, 'failed', p_backoff_base_ms, p_backoff_max_ms, p_tolerance_ms);
    END IF;
    UPDATE lonnymq_message m SET snoozes = m.snoozes + 1 WHERE m.id = p_id;
    PERFORM lonnymq_unlease_v1(ARRAY[p_id], ARRAY[lonnymq_now_ms_v1() + p_delay_ms], NULL, true, p_tolerance_ms);
    RETURN 'snoozed';
END
$$;

-- Give leased messages back without counting the attempt (a worker shutting down before it
-- started them). Returns the ids released.
CREATE FUNCTION lonnymq_release_v1(p_ids bigint[], p_tokens uuid[], p_tolerance_ms bigint DEFAULT 50)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_ids bigint[];
    v_ats bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_list_v1('tokens', pg_catalog.array_ndims(p_tokens));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT pg_catalog.array_agg(m.id ORDER BY m.id), pg_catalog.array_agg(m.dequeue_at ORDER BY m.id) INTO v_ids, v_ats
      FROM (SELECT mm.id, mm.dequeue_at FROM lonnymq_message mm
             WHERE mm.id = ANY (p_ids)
               AND (mm.id, mm.lease_token) IN (SELECT u.id, u.token FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_tokens)) AS u(id, token))
             ORDER BY mm.id FOR UPDATE) m;
    IF v_ids IS NULL THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    PERFORM lonnymq_unlease_v1(v_ids, v_ats, NULL, true, p_tolerance_ms);
    RETURN v_ids;
END
$$;

-- Recover messages whose lease expired (their worker died or stalled): they become ready
-- again at their old position, or dead when their attempts are used up, and their
-- concurrency slots come back. Bounded per call, never waits on a lock. Also prunes dedup
-- keys older than p_dedup_window_ms. Returns the number of messages recovered.
CREATE FUNCTION lonnymq_reap_v1(
    p_limit            integer DEFAULT 500,
    p_dedup_window_ms  bigint  DEFAULT 86400000,
    p_tolerance_ms     bigint  DEFAULT 50
) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_now      bigint := lonnymq_now_ms_v1();
    v_channels bigint[];
    v_dead     bigint[];
    v_back     bigint[];
    v_back_at  bigint[];
    v_counts   bigint[];
BEGIN
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 100000::bigint, false);
    PERFORM lonnymq_check_range_v1('dedup_window', p_dedup_window_ms, 0::bigint, 31622400000::bigint, true);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- Expired leases of channels we can lock now without waiting.
    WITH expired AS (
        SELECT m.id, m.channel_id, m.attempts, m.max_attempts, m.dequeue_at
          FROM lonnymq_message m
         WHERE m.lease_until < v_now
         ORDER BY m.lease_until
         LIMIT p_limit
           FOR UPDATE OF m SKIP LOCKED
    ), lockable AS (
        SELECT c.id FROM lonnymq_channel c
         WHERE c.id IN (SELECT e.channel_id FROM expired e)
         ORDER BY c.id
           FOR NO KEY UPDATE OF c SKIP LOCKED
    )
    SELECT pg_catalog.array_agg(e.id ORDER BY e.id) FILTER (WHERE e.attempts >= e.max_attempts),
           pg_catalog.array_agg(e.id ORDER BY e.id) FILTER (WHERE e.attempts < e.max_attempts),
           pg_catalog.array_agg(e.dequeue_at ORDER BY e.id) FILTER (WHERE e.attempts < e.max_attempts)
      INTO v_dead, v_back, v_back_at
      FROM expired e
     WHERE e.channel_id IN (SELECT l.id FROM lockable l WHERE
               pg_catalog.pg_try_advisory_xact_lock_shared(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(l.id)));

    IF v_dead IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_dead, 'lease_expired', 'lease expired with no attempts left');
    END IF;
    IF v_back IS NOT NULL THEN
        PERFORM lonnymq_unlease_v1(v_back, v_back_at, 'lease expired', false, p_tolerance_ms);
    END IF;

    -- Releases counted away from the channel rows by backends that are gone: into their
    -- channels' released_total (rows and channels this call can lock without waiting).
    WITH gone AS (
        DELETE FROM lonnymq_release_count r
         WHERE (r.channel_id, r.backend) IN (
             SELECT rr.channel_id, rr.backend FROM lonnymq_release_count rr
               JOIN lonnymq_channel c ON c.id = rr.channel_id
              WHERE rr.backend NOT IN (SELECT a.pid FROM pg_catalog.pg_stat_activity a WHERE a.pid IS NOT NULL)
              LIMIT p_limit
                FOR UPDATE OF rr SKIP LOCKED
                FOR NO KEY UPDATE OF c SKIP LOCKED)
        RETURNING r.channel_id, r.released
    )
    SELECT pg_catalog.array_agg(g.channel_id ORDER BY g.channel_id), pg_catalog.array_agg(g.n ORDER BY g.channel_id)
      INTO v_channels, v_counts
      FROM (SELECT gone.channel_id, pg_catalog.sum(gone.released)::bigint AS n FROM gone GROUP BY gone.channel_id) g;
    IF v_channels IS NOT NULL THEN
        UPDATE lonnymq_channel c SET released_total = c.released_total + u.n
          FROM ROWS FROM (pg_catalog.unnest(v_channels), pg_catalog.unnest(v_counts)) AS u(id, n)
         WHERE c.id = u.id AND c.id = ANY (v_channels);
    END IF;

    IF p_dedup_window_ms IS NOT NULL THEN
        DELETE FROM lonnymq_dedup d
         WHERE (d.channel_id, d.dedup_key) IN (
             SELECT dd.channel_id, dd.dedup_key FROM lonnymq_dedup dd
              WHERE dd.created_at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => p_dedup_window_ms::double precision / 1000::double precision)
              LIMIT p_limit * 20 FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN coalesce(pg_catalog.cardinality(v_dead), 0) + coalesce(pg_catalog.cardinality(v_back), 0);
END
$$;

-- ---------------------------------------------------------------------------------------
-- Operations: requeue dead messages, cancel, run now, purge, configure or delete a channel
-- ---------------------------------------------------------------------------------------

-- Move dead messages back into their channel (recreated if it was deleted), ready now.
-- Returns the ids requeued (a message keeps its id). A step of a cancelled workflow stays
-- dead and is left out of the result: run again, it would release nothing, and its workflow
-- would stay cancelled.
CREATE FUNCTION lonnymq_requeue_dead_v1(
    p_ids bigint[], p_reset_attempts boolean DEFAULT true, p_tolerance_ms bigint DEFAULT 50
) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_row record;
    v_ids bigint[] := ARRAY[]::bigint[];
    v_channel_id bigint;
    v_locked bigint[];
    v_at bigint;
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- Channels first (created in name order if missing, then locked in id order), so
    -- requeues and enqueues over several channels take channel locks in one order.
    PERFORM lonnymq_channel_id_v1(x.queue, x.channel) FROM (
        SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d
         WHERE d.id = ANY (p_ids) ORDER BY d.queue, d.channel) x;
    SELECT pg_catalog.array_agg(l.id ORDER BY l.id) INTO v_locked
      FROM (SELECT c.id FROM lonnymq_channel c
              JOIN (SELECT DISTINCT d.queue, d.channel FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids)) x
                ON c.queue = x.queue AND c.name = x.channel
             ORDER BY c.id FOR NO KEY UPDATE OF c) l;
    -- The producer's shared locks, at most 1,024 however many channels (a requeue of every
    -- dead letter of a queue with 100,000 tenants took one each, from the server's lock table).
    IF v_locked IS NOT NULL THEN
        PERFORM lonnymq_lock_channels_v1(v_locked);
    END IF;
    FOR v_row IN
        SELECT d.* FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids) ORDER BY d.id FOR UPDATE
    LOOP
        IF pg_catalog.starts_with(v_row.dedup_key, 'lonnymq.step:') THEN
            -- The step's row first (a workflow's cancel locks its steps, then the workflow):
            -- the state read next, in a statement of its own, sees a cancel that committed
            -- while this waited; a cancel that starts now finds the step queued again.
            PERFORM 1 FROM lonnymq_workflow_step s WHERE s.id = v_row.id FOR UPDATE;
            IF EXISTS (SELECT 1 FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
                        WHERE s.id = v_row.id AND w.state = 'cancelled') THEN
                CONTINUE;
            END IF;
        END IF;
        v_channel_id := lonnymq_channel_id_v1(v_row.queue, v_row.channel);
        -- A channel deleted after the locks above and created again since has a new id.
        IF v_locked IS NULL OR v_channel_id <> ALL (v_locked) THEN
            PERFORM lonnymq_lock_channel_v1(v_channel_id);
        END IF;
        -- Held already, unless it was deleted after the lock above and created again since.
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);
        -- Ready now; in an ordered channel, back at the head (no later than its first waiting
        -- message: the tie goes to the lower id, this one's), and a channel it blocked is free.
        v_at := v_now;
        IF EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = v_channel_id AND c.ordered) THEN
            SELECT least(v_now, coalesce(pg_catalog.min(h.dequeue_at), v_now)) INTO v_at
              FROM (SELECT mm.dequeue_at FROM lonnymq_message mm
                     WHERE mm.channel_id = v_channel_id AND mm.lease_until IS NULL
                     ORDER BY mm.dequeue_at, mm.id LIMIT 1) h;
            UPDATE lonnymq_channel c SET hold_until = NULL, blocked_by = NULL
             WHERE c.id = v_channel_id AND c.blocked_by = v_row.id;
        END IF;
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, attempts,
                                     max_attempts, dedup_key, enqueued_at, last_error, snoozes, cost, slots)
        VALUES (v_row.id, v_channel_id, v_row.payload, v_at, v_row.priority,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.attempts END,
                CASE WHEN p_reset_attempts THEN v_row.max_attempts
                     ELSE greatest(v_row.max_attempts, v_row.attempts + 1) END,
                v_row.dedup_key, v_row.enqueued_at, v_row.last_error,
                CASE WHEN p_reset_attempts THEN 0 ELSE v_row.snoozes END, v_row.cost, v_row.slots);
        DELETE FROM lonnymq_dead_message d WHERE d.id = v_row.id;
        IF lonnymq_wake_v1(v_channel_id, v_at, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_row.queue);
        END IF;
        v_ids := v_ids OPERATOR(pg_catalog.||) v_row.id;
    END LOOP;
    RETURN v_ids;
END
$$;

-- Cancel messages: one waiting (ready or scheduled) is deleted at once (and frees its dedup
-- key); one in flight is marked cancel_requested, and its worker interrupts the handler at
-- its next heartbeat and dead-letters it as 'cancelled'. An id that names no message fails
-- the whole call with LQ170 (nothing is cancelled) unless p_missing_ok. The message rows
-- are locked in id order first, so a message cannot finish between the check and the mark.
-- Returns a row per message cancelled or marked.
CREATE FUNCTION lonnymq_cancel_v2(p_ids bigint[], p_missing_ok boolean DEFAULT false)
RETURNS TABLE (id bigint, running boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_found   bigint[];
    v_running bigint[];
    v_missing bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    SELECT coalesce(pg_catalog.array_agg(l.id), ARRAY[]::bigint[]),
           coalesce(pg_catalog.array_agg(l.id) FILTER (WHERE l.leased), ARRAY[]::bigint[])
      INTO v_found, v_running
      FROM (SELECT m.id, m.lease_token IS NOT NULL AS leased FROM lonnymq_message m
             WHERE m.id = ANY (p_ids) ORDER BY m.id FOR UPDATE) l;
    IF NOT coalesce(p_missing_ok, false) THEN
        SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_missing
          FROM pg_catalog.unnest(p_ids) AS u(id)
         WHERE u.id IS NULL OR u.id <> ALL (v_found);
        IF v_missing IS NOT NULL THEN
            -- The message names the first 20 (a call may name a million); DETAIL has them all.
            RAISE EXCEPTION 'cannot cancel % message(s): not found (never enqueued, or already acked, cancelled or dead); nothing was cancelled: %',
                pg_catalog.cardinality(v_missing),
                pg_catalog.array_to_string(v_missing[1:20], ', ', 'null')
                    OPERATOR(pg_catalog.||) CASE WHEN pg_catalog.cardinality(v_missing) > 20
                        THEN pg_catalog.format(' and %s more', pg_catalog.cardinality(v_missing) - 20) ELSE '' END
                USING ERRCODE = 'LQ170', DETAIL = pg_catalog.array_to_string(v_missing, ',', 'null');
        END IF;
    END IF;
    UPDATE lonnymq_message m SET cancel_requested = true
     WHERE m.id = ANY (v_running) AND NOT m.cancel_requested;
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (v_found) AND m.lease_token IS NULL
        RETURNING m.id, m.channel_id, m.dedup_key
    )
    DELETE FROM lonnymq_dedup d USING gone g
     WHERE d.channel_id = g.channel_id AND d.dedup_key = g.dedup_key AND d.message_id = g.id;
    RETURN QUERY
        SELECT f.id, f.id = ANY (v_running) FROM pg_catalog.unnest(v_found) AS f(id) ORDER BY f.id;
END
$$;

-- lonnymq_cancel_v2, for api.cancel: a waiting message that is a workflow step goes to the
-- dead letters as 'cancelled' instead of being deleted, so that its workflow fails as it does
-- when a running step is cancelled (lonnymq_workflow_cancel_v1 keeps calling _v2: a workflow's
-- own cancel deletes its waiting steps' messages).
CREATE FUNCTION lonnymq_cancel_v3(p_ids bigint[], p_missing_ok boolean DEFAULT false)
RETURNS TABLE (id bigint, running boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_found   bigint[];
    v_running bigint[];
    v_missing bigint[];
    v_steps   bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    SELECT coalesce(pg_catalog.array_agg(l.id), ARRAY[]::bigint[]),
           coalesce(pg_catalog.array_agg(l.id) FILTER (WHERE l.leased), ARRAY[]::bigint[])
      INTO v_found, v_running
      FROM (SELECT m.id, m.lease_token IS NOT NULL AS leased FROM lonnymq_message m
             WHERE m.id = ANY (p_ids) ORDER BY m.id FOR UPDATE) l;
    IF NOT coalesce(p_missing_ok, false) THEN
        SELECT pg_catalog.array_agg(DISTINCT u.id ORDER BY u.id) INTO v_missing
          FROM pg_catalog.unnest(p_ids) AS u(id)
         WHERE u.id IS NULL OR u.id <> ALL (v_found);
        IF v_missing IS NOT NULL THEN
            -- The message names the first 20 (a call may name a million); DETAIL has them all.
            RAISE EXCEPTION 'cannot cancel % message(s): not found (never enqueued, or already acked, cancelled or dead); nothing was cancelled: %',
                pg_catalog.cardinality(v_missing),
                pg_catalog.array_to_string(v_missing[1:20], ', ', 'null')
                    OPERATOR(pg_catalog.||) CASE WHEN pg_catalog.cardinality(v_missing) > 20
                        THEN pg_catalog.format(' and %s more', pg_catalog.cardinality(v_missing) - 20) ELSE '' END
                USING ERRCODE = 'LQ170', DETAIL = pg_catalog.array_to_string(v_missing, ',', 'null');
        END IF;
    END IF;
    UPDATE lonnymq_message m SET cancel_requested = true
     WHERE m.id = ANY (v_running) AND NOT m.cancel_requested;
    -- A waiting workflow step goes to the dead letters as 'cancelled', as a running one does
    -- when its worker stops it: its workflow fails (lonnymq_workflow_step_dead_v1), where a
    -- deleted step would leave it running for good, and requeue_dead brings it back.
    SELECT pg_catalog.array_agg(m.id ORDER BY m.id) INTO v_steps FROM lonnymq_message m
     WHERE m.id = ANY (v_found) AND m.lease_token IS NULL
       AND pg_catalog.starts_with(m.dedup_key, 'lonnymq.step:');
    IF v_steps IS NOT NULL THEN
        PERFORM lonnymq_bury_v1(v_steps, 'cancelled', NULL);
    END IF;
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.id = ANY (v_found) AND m.lease_token IS NULL
        RETURNING m.id, m.channel_id, m.dedup_key
    )
    DELETE FROM lonnymq_dedup d USING gone g
     WHERE d.channel_id = g.channel_id AND d.dedup_key = g.dedup_key AND d.message_id = g.id;
    RETURN QUERY
        SELECT f.id, f.id = ANY (v_running) FROM pg_catalog.unnest(v_found) AS f(id) ORDER BY f.id;
END
$$;

-- Strict order: the ordered channels whose hold (a retry, a snooze, a durable sleep or wait:
-- lonnymq_unlease_v1 keeps the message at the head and holds the channel until its new time)
-- is held by one of these waiting messages, their head, lose the hold now, so the message runs
-- first; a dead message's block (blocked_by) stays. Channel rows are locked in id order.
-- Returns the channels and the messages that hold them no more. For lonnymq_run_now_v1
-- (and resume) and lonnymq_emit_event_v1.
CREATE FUNCTION lonnymq_lift_holds_v1(p_ids bigint[])
RETURNS TABLE (channel_id bigint, queue text, message_id bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
BEGIN
    RETURN QUERY
        WITH held AS (
            SELECT c.id, m.id AS message_id
              FROM lonnymq_message m
              JOIN lonnymq_channel c ON c.id = m.channel_id
             WHERE m.id = ANY (p_ids) AND m.lease_until IS NULL
               AND c.ordered AND c.blocked_by IS NULL AND c.hold_until > v_now
               AND m.id = (SELECT h.id FROM lonnymq_message h
                            WHERE h.channel_id = m.channel_id AND h.lease_until IS NULL
                            ORDER BY h.dequeue_at, h.id LIMIT 1)
             ORDER BY c.id
               FOR NO KEY UPDATE OF c
        ), lifted AS (
            UPDATE lonnymq_channel c SET hold_until = NULL
              FROM held WHERE c.id = held.id
            RETURNING c.id, c.queue, held.message_id
        )
        SELECT l.id, l.queue, l.message_id FROM lifted l ORDER BY l.id;
END
$$;

-- Make waiting (scheduled or backed-off) messages ready now. Returns the ids moved.
CREATE FUNCTION lonnymq_run_now_v1(p_ids bigint[], p_tolerance_ms bigint DEFAULT 50) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_ids bigint[];
    v_ch  record;
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    -- The producer's shared locks on the channels (at most 1,024, see lonnymq_lock_channels_v1).
    PERFORM lonnymq_lock_channels_v1(pg_catalog.array_agg(m.channel_id))
      FROM lonnymq_message m WHERE m.id = ANY (p_ids) AND m.lease_token IS NULL HAVING pg_catalog.count(*) > 0;
    WITH moved AS (
        UPDATE lonnymq_message m SET dequeue_at = v_now
         WHERE m.id = ANY (p_ids) AND m.lease_token IS NULL AND m.dequeue_at > v_now
        RETURNING m.id
    )
    SELECT coalesce(pg_catalog.array_agg(moved.id ORDER BY moved.id), ARRAY[]::bigint[]) INTO v_ids FROM moved;
    -- A message that holds its ordered channel (it kept its place at the head) runs now too.
    SELECT pg_catalog.array_agg(u.id ORDER BY u.id) INTO v_ids
      FROM (SELECT pg_catalog.unnest(v_ids) UNION SELECT l.message_id FROM lonnymq_lift_holds_v1(p_ids) l) u(id);
    v_ids := coalesce(v_ids, ARRAY[]::bigint[]);
    FOR v_ch IN
        SELECT DISTINCT m.channel_id, c.queue FROM lonnymq_message m
          JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.id = ANY (v_ids) ORDER BY m.channel_id
    LOOP
        IF lonnymq_wake_v1(v_ch.channel_id, v_now, p_tolerance_ms) THEN
            PERFORM pg_catalog.pg_notify('lonnymq_wakeup', v_ch.queue);
        END IF;
    END LOOP;
    RETURN v_ids;
END
$$;

-- Delete every message of a channel that is not in flight (and free their dedup keys).
-- Returns how many. Reads them along the ready index (lease_until IS NULL, which a CHECK
-- makes the same as lease_token IS NULL; the planner needs the index's own predicate).
CREATE FUNCTION lonnymq_purge_channel_v1(p_channel_id bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n integer;
BEGIN
    WITH gone AS (
        DELETE FROM lonnymq_message m
         WHERE m.channel_id = p_channel_id AND m.lease_until IS NULL AND m.lease_token IS NULL
        RETURNING m.id, m.dedup_key
    ), freed AS (
        DELETE FROM lonnymq_dedup d USING gone g
         WHERE d.channel_id = p_channel_id AND d.dedup_key = g.dedup_key AND d.message_id = g.id
    )
    SELECT pg_catalog.count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;

-- Create a channel or change the limits given: a NULL argument leaves that limit as it is
-- (p_unlimited removes the concurrency cap, p_no_rate the token bucket). A rate is given
-- whole (count, period and burst). The channel row is locked before its limits are read,
-- so an edit of one limit never overwrites a concurrent change of another.
-- Setting a limit on a channel that had none starts counting the leases already running, so
-- the limit holds at once. Their message rows are claimed with SKIP LOCKED after the channel
-- row is locked: a message locked right now is being acked, failed or reaped, i.e. leaving
-- flight, and waiting on it could deadlock with an ack (message row, then channel row).
-- A new or changed rate starts with a full bucket; a new weight starts a new round.
CREATE FUNCTION lonnymq_configure_channel_v3(
    p_queue text, p_channel text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_release_interval_ms bigint DEFAULT NULL, p_paused boolean DEFAULT NULL, p_weight integer DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_id       bigint;
    v_head     bigint;
    v_old      lonnymq_channel%ROWTYPE;
    v_counted  integer := 0;
    v_max      integer;
    v_interval bigint;
    v_new_rate boolean;
BEGIN
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    PERFORM lonnymq_check_range_v1('release_interval_ms', p_release_interval_ms, 0::bigint, 31622400000::bigint, true);
    PERFORM lonnymq_check_range_v1('weight', p_weight::bigint, 1::bigint, 1000::bigint, true);
    v_new_rate := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL;
    IF v_new_rate THEN
        IF coalesce(p_no_rate, false) THEN
            PERFORM lonnymq_raise_invalid_v1('rate', 'cannot be combined with no_rate', p_rate_count::text);
        END IF;
        PERFORM lonnymq_check_range_v1('rate_count', p_rate_count::bigint, 1::bigint, 1000000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_period_ms', p_rate_period_ms, 1::bigint, 31622400000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_burst', p_rate_burst::bigint, 1::bigint, 1000000::bigint, false);
    END IF;
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    v_id := lonnymq_channel_id_v1(p_queue, p_channel);
    SELECT * INTO v_old FROM lonnymq_channel c WHERE c.id = v_id FOR NO KEY UPDATE;
    -- Dequeues that lease this channel's messages without its row (lonnymq_dequeue_held_v1)
    -- hold this lock shared and read the limits after taking it: wait for those running, so
    -- the leases counted below include theirs and later ones see the new limits.
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lease_lock_ns_v1(), lonnymq_lock_key_v1(v_id));
    v_max := CASE WHEN coalesce(p_unlimited, false) THEN NULL
                  ELSE coalesce(p_max_concurrency, v_old.max_concurrency) END;
    v_interval := coalesce(p_release_interval_ms, v_old.release_interval_ms);
    IF v_old.max_concurrency IS NULL AND v_max IS NOT NULL THEN
        WITH claimed AS (
            UPDATE lonnymq_message m SET slot_taken = true
             WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                             WHERE mm.lease_until IS NOT NULL AND mm.channel_id = v_id AND NOT mm.slot_taken
                               FOR UPDATE SKIP LOCKED)
            RETURNING m.slots
        )
        SELECT coalesce(pg_catalog.sum(cl.slots), 0) INTO v_counted FROM claimed cl;
    END IF;
    SELECT mm.dequeue_at INTO v_head FROM lonnymq_message mm
     WHERE mm.channel_id = v_id AND mm.lease_until IS NULL ORDER BY mm.dequeue_at, mm.id LIMIT 1;
    UPDATE lonnymq_channel c
       SET max_concurrency = v_max,
           release_interval_ms = v_interval,
           paused = coalesce(p_paused, c.paused),
           in_flight = c.in_flight + v_counted,
           weight = coalesce(p_weight, c.weight),
           round_used = CASE WHEN p_weight IS NULL OR p_weight = c.weight THEN c.round_used ELSE 0 END,
           rate_count = CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE c.rate_count END,
           rate_period_ms = CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE c.rate_period_ms END,
           rate_burst = CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE c.rate_burst END,
           bucket_level = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE c.bucket_level END,
           next_token_at = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE c.next_token_at END,
           next_dequeue_at = CASE WHEN v_head IS NULL THEN c.next_dequeue_at
                                  ELSE least(coalesce(c.next_dequeue_at, v_head),
                                             greatest(v_head, c.last_dequeue_at + v_interval,
                                                      CASE WHEN v_new_rate OR p_no_rate THEN NULL
                                                           ELSE c.next_token_at END)) END
     WHERE c.id = v_id;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    RETURN v_id;
END
$$;

-- A plan name that names no plan: LQ260, worded like an invalid argument (field plan).
CREATE FUNCTION lonnymq_raise_unknown_plan_v1(p_name text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION 'plan must name an existing plan (configure_plan creates one), got %',
                    pg_catalog.quote_nullable(p_name)
        USING ERRCODE = 'LQ260', COLUMN = 'plan';
END
$$;

-- Plan names: 1 to 100 characters, not only blanks.
CREATE FUNCTION lonnymq_check_plan_name_v1(p_name text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_name IS NULL OR pg_catalog.char_length(p_name) NOT BETWEEN 1 AND 100 OR p_name !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('plan', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_name));
    END IF;
END
$$;

-- A new channel follows its queue's default plan (lonnymq_queue_plan) unless it names one,
-- and takes the plan's value of every limit it does not set itself, and its strict order. A BEFORE INSERT trigger:
-- it runs when a channel is created (by an enqueue, a publish, a requeue or configure_channel),
-- never on the rows a dequeue or an ack writes. The plan's row is read FOR SHARE, so a
-- concurrent change of the plan either waits for this transaction (and then rewrites the new
-- channel with the others) or committed before and is read here.
CREATE FUNCTION lonnymq_channel_plan_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_plan lonnymq_plan%ROWTYPE;
BEGIN
    IF NEW.plan_id IS NULL THEN
        SELECT qp.plan_id INTO NEW.plan_id FROM lonnymq_queue_plan qp WHERE qp.queue = NEW.queue;
    END IF;
    IF NEW.plan_id IS NOT NULL THEN
        SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.id = NEW.plan_id FOR SHARE;
        IF NOT NEW.own_weight THEN
            NEW.weight := v_plan.weight;
        END IF;
        IF NOT NEW.own_max_concurrency THEN
            NEW.max_concurrency := v_plan.max_concurrency;
        END IF;
        IF NOT NEW.own_release_interval THEN
            NEW.release_interval_ms := v_plan.release_interval_ms;
        END IF;
        IF NOT NEW.own_rate THEN
            NEW.rate_count := v_plan.rate_count;
            NEW.rate_period_ms := v_plan.rate_period_ms;
            NEW.rate_burst := v_plan.rate_burst;
        END IF;
        IF NOT NEW.own_ordered THEN
            NEW.ordered := v_plan.ordered;
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER lonnymq_channel_plan BEFORE INSERT ON lonnymq_channel
    FOR EACH ROW EXECUTE FUNCTION lonnymq_channel_plan_v1();

-- A channel's key (lonnymq_channel_key) for an insert that did not write it first (the
-- ORM, a hand-written INSERT): a (queue, name) that another channel has fails as a unique
-- violation of lonnymq_channel_key_queue_name_uniq, as it did on the channel's own
-- constraint before 0059. The functions that create channels write the keys first and say
-- so for the statement that inserts the channels (the transaction-local setting
-- lonnymq.channel_keys = 'written'), which the trigger's WHEN tests without a call: the
-- call and its two probes made a bulk enqueue into 2,000 new channels 1.36x as long.
CREATE FUNCTION lonnymq_channel_key_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO lonnymq_channel_key (id, queue, name) VALUES (NEW.id, NEW.queue, NEW.name)
        ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM lonnymq_channel_key k
                                  WHERE k.id = NEW.id AND k.queue = NEW.queue AND k.name = NEW.name) THEN
        RAISE EXCEPTION 'channel id % belongs to another channel than %/%', NEW.id, NEW.queue, NEW.name
            USING ERRCODE = 'unique_violation', TABLE = 'lonnymq_channel_key';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER lonnymq_channel_key BEFORE INSERT ON lonnymq_channel
    FOR EACH ROW WHEN (pg_catalog.current_setting('lonnymq.channel_keys', true) IS DISTINCT FROM 'written')
    EXECUTE FUNCTION lonnymq_channel_key_v1();

-- A channel's key goes with it (a prune, a delete, the admin, any DELETE or TRUNCATE), in the
-- statement that deletes it: its dead messages' channel_id becomes NULL then (the foreign key).
CREATE FUNCTION lonnymq_channel_gone_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        -- A DELETE: a TRUNCATE here fails while dead messages refer to the keys.
        DELETE FROM lonnymq_channel_key;
    ELSE
        DELETE FROM lonnymq_channel_key k USING gone g WHERE k.id = g.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER lonnymq_channel_gone AFTER DELETE ON lonnymq_channel
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_channel_gone_v1();
CREATE TRIGGER lonnymq_channel_truncated AFTER TRUNCATE ON lonnymq_channel
    FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_channel_gone_v1();

-- Create or change a plan: a NULL limit is left as it is (a new plan starts from the
-- defaults: weight 1, no cap, no interval, no rate, not ordered); p_unlimited removes the cap,
-- p_no_rate the bucket. p_ordered: strict order for the plan's channels (NULL: as it is); an
-- ordered plan's cap is 1 (p_ordered true without a cap sets it, another cap is refused:
-- LQ001 max_concurrency, and lonnymq_plan_ordered_one_at_a_time). Every channel that follows the plan takes the new values of the limits it does
-- not set itself, in one statement (no loop over channels), with what
-- lonnymq_configure_channel_v3 does to one channel:
-- - a channel that gets a cap where it had none counts its leases already running. Before
--   that, the ready messages of those channels are locked: a dequeue leasing them without
--   the channel's row (lonnymq_dequeue_held_v1, which serves only channels without limits)
--   is waited for, and none can start until this commits (it skips locked messages), so no
--   lease escapes the count;
-- - the channel rows are locked in id order (the order acks give slots back in), then
--   written; a new weight starts a new round, a new or changed rate a full bucket, and a
--   shorter interval or a bucket removed may bring the next turn earlier;
-- - with lonnymq_order_channel_v1's meaning, each channel that does not set its order itself
--   (own_ordered) becomes ordered with the plan, or stops being ordered (its hold or block
--   lifted at once, its next turn brought back to its head) in the same row write as its cap.
--   Refused (LQ001) before any channel is written: ordering a channel whose own cap is not 1
--   (field ordered), a cap other than 1 for an ordered channel that follows the plan's cap
--   (field max_concurrency).
-- The plan's row is locked first (channel creation and configure_channel read it FOR SHARE,
-- before the channel's row). Returns how many channels changed.
CREATE FUNCTION lonnymq_configure_plan_v2(
    p_name text, p_weight integer DEFAULT NULL, p_max_concurrency integer DEFAULT NULL,
    p_unlimited boolean DEFAULT false, p_release_interval_ms bigint DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false, p_ordered boolean DEFAULT NULL
) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
-- Compiling the rewrite of every channel cost more than a third of it (JIT on a large count).
SET jit = off
AS $$
DECLARE
    v_plan         lonnymq_plan%ROWTYPE;
    v_new_rate     boolean;
    v_claim_ids    bigint[];
    v_claim_counts integer[];
    v_queues       text[];
    v_changed      integer;
    v_old_cap      integer;
    v_was_ordered  boolean;
    v_clash        record;
BEGIN
    PERFORM lonnymq_check_plan_name_v1(p_name);
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    IF p_ordered AND (coalesce(p_unlimited, false) OR p_max_concurrency <> 1) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be 1 for an ordered plan',
                                         coalesce(p_max_concurrency::text, 'null'));
    END IF;
    PERFORM lonnymq_check_range_v1('release_interval_ms', p_release_interval_ms, 0::bigint, 31622400000::bigint, true);
    PERFORM lonnymq_check_range_v1('weight', p_weight::bigint, 1::bigint, 1000::bigint, true);
    v_new_rate := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL;
    IF v_new_rate THEN
        IF coalesce(p_no_rate, false) THEN
            PERFORM lonnymq_raise_invalid_v1('rate', 'cannot be combined with no_rate', p_rate_count::text);
        END IF;
        PERFORM lonnymq_check_range_v1('rate_count', p_rate_count::bigint, 1::bigint, 1000000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_period_ms', p_rate_period_ms, 1::bigint, 31622400000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_burst', p_rate_burst::bigint, 1::bigint, 1000000::bigint, false);
    END IF;

    INSERT INTO lonnymq_plan (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.name = p_name FOR NO KEY UPDATE;
    v_old_cap := v_plan.max_concurrency;
    v_was_ordered := v_plan.ordered;
    IF p_ordered IS NULL AND v_plan.ordered AND (coalesce(p_unlimited, false) OR p_max_concurrency <> 1) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency',
                                         'must stay 1 while the plan is ordered (configure_plan(ordered=False) first)',
                                         coalesce(p_max_concurrency::text, 'null'));
    END IF;
    UPDATE lonnymq_plan p
       SET weight = coalesce(p_weight, p.weight),
           max_concurrency = CASE WHEN coalesce(p_unlimited, false) THEN NULL
                                  WHEN p_ordered AND p_max_concurrency IS NULL THEN 1
                                  ELSE coalesce(p_max_concurrency, p.max_concurrency) END,
           ordered = coalesce(p_ordered, p.ordered),
           release_interval_ms = coalesce(p_release_interval_ms, p.release_interval_ms),
           rate_count = CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE p.rate_count END,
           rate_period_ms = CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE p.rate_period_ms END,
           rate_burst = CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE p.rate_burst END,
           updated_at = pg_catalog.now()
     WHERE p.id = v_plan.id
    RETURNING p.* INTO v_plan;

    IF v_plan.max_concurrency IS NOT NULL THEN
        -- Channels getting a cap: no lease without their rows until this commits.
        PERFORM 1 FROM lonnymq_message m
         WHERE m.channel_id IN (SELECT c.id FROM lonnymq_channel c
                                 WHERE c.plan_id = v_plan.id AND NOT c.own_max_concurrency
                                   AND c.max_concurrency IS NULL)
           AND m.lease_until IS NULL
         ORDER BY m.id
           FOR UPDATE OF m;
    END IF;
    PERFORM 1 FROM lonnymq_channel c WHERE c.plan_id = v_plan.id ORDER BY c.id FOR NO KEY UPDATE OF c;
    -- Strict order and a cap other than 1 never meet on a channel (the channel's CHECK): say
    -- which channel stands in the way, and how to move it, before writing any.
    IF v_plan.ordered AND NOT v_was_ordered THEN
        SELECT c.queue, c.name, c.max_concurrency INTO v_clash FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id AND NOT c.own_ordered AND c.own_max_concurrency
           AND c.max_concurrency IS DISTINCT FROM 1
         ORDER BY c.id LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('ordered', pg_catalog.format(
                'cannot order channel %s of queue %s, whose own max_concurrency is %s (let its cap follow the plan, '
                'or keep it unordered: configure_channel(..., ordered=False))',
                pg_catalog.quote_literal(v_clash.name), pg_catalog.quote_literal(v_clash.queue),
                coalesce(v_clash.max_concurrency::text, 'null')), 'true');
        END IF;
    END IF;
    IF v_plan.max_concurrency IS DISTINCT FROM 1 AND v_old_cap IS NOT DISTINCT FROM 1 THEN
        SELECT c.queue, c.name INTO v_clash FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id AND c.own_ordered AND c.ordered AND NOT c.own_max_concurrency
         ORDER BY c.id LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1('max_concurrency', pg_catalog.format(
                'must stay 1: channel %s of queue %s is ordered and follows the plan''s cap (give it its own '
                'cap of 1 first: configure_channel(..., max_concurrency=1))',
                pg_catalog.quote_literal(v_clash.name), pg_catalog.quote_literal(v_clash.queue)),
                coalesce(v_plan.max_concurrency::text, 'null'));
        END IF;
    END IF;
    IF v_plan.max_concurrency IS NOT NULL THEN
        -- A new statement: it sees the leases of the dequeuers the row locks waited for. A
        -- locked lease is being acked, failed or reaped (leaving flight): skipped, as in
        -- lonnymq_configure_channel_v3.
        WITH claimed AS (
            UPDATE lonnymq_message m SET slot_taken = true
             WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                             WHERE mm.channel_id IN (SELECT c.id FROM lonnymq_channel c
                                                      WHERE c.plan_id = v_plan.id AND NOT c.own_max_concurrency
                                                        AND c.max_concurrency IS NULL)
                               AND mm.lease_until IS NOT NULL AND NOT mm.slot_taken
                               FOR UPDATE SKIP LOCKED)
            RETURNING m.channel_id, m.slots
        )
        SELECT pg_catalog.array_agg(x.channel_id), pg_catalog.array_agg(x.n)
          INTO v_claim_ids, v_claim_counts
          FROM (SELECT cl.channel_id, pg_catalog.sum(cl.slots)::integer AS n FROM claimed cl GROUP BY cl.channel_id) x;
    END IF;

    WITH target AS (
        SELECT c.id,
               CASE WHEN c.own_weight THEN c.weight ELSE v_plan.weight END AS weight,
               CASE WHEN c.own_max_concurrency THEN c.max_concurrency ELSE v_plan.max_concurrency END
                   AS max_concurrency,
               CASE WHEN c.own_release_interval THEN c.release_interval_ms ELSE v_plan.release_interval_ms END
                   AS release_interval_ms,
               CASE WHEN c.own_rate THEN c.rate_count ELSE v_plan.rate_count END AS rate_count,
               CASE WHEN c.own_rate THEN c.rate_period_ms ELSE v_plan.rate_period_ms END AS rate_period_ms,
               CASE WHEN c.own_rate THEN c.rate_burst ELSE v_plan.rate_burst END AS rate_burst,
               CASE WHEN c.own_ordered THEN c.ordered ELSE v_plan.ordered END AS ordered,
               c.ordered AS old_ordered, c.hold_until AS old_hold_until,
               c.weight AS old_weight, c.max_concurrency AS old_max_concurrency,
               c.release_interval_ms AS old_release_interval_ms, c.rate_count AS old_rate_count,
               c.rate_period_ms AS old_rate_period_ms, c.rate_burst AS old_rate_burst
          FROM lonnymq_channel c
         WHERE c.plan_id = v_plan.id
    ), changed AS (
        SELECT t.*, coalesce(cl.n, 0) AS claimed,
               (t.rate_count, t.rate_period_ms, t.rate_burst)
                   IS DISTINCT FROM (t.old_rate_count, t.old_rate_period_ms, t.old_rate_burst) AS new_rate,
               h.dequeue_at AS head
          FROM target t
          LEFT JOIN ROWS FROM (pg_catalog.unnest(v_claim_ids), pg_catalog.unnest(v_claim_counts)) AS cl(channel_id, n)
            ON cl.channel_id = t.id
          -- The head only where the next turn may come earlier: a shorter interval, a rate
          -- changed or removed, a hold lifted (a cap or a weight does not move it).
          LEFT JOIN LATERAL (
              SELECT mm.dequeue_at FROM lonnymq_message mm
               WHERE mm.channel_id = t.id AND mm.lease_until IS NULL
                 AND (t.release_interval_ms < t.old_release_interval_ms
                      OR (t.old_hold_until IS NOT NULL AND NOT t.ordered)
                      OR (t.rate_count, t.rate_period_ms, t.rate_burst)
                         IS DISTINCT FROM (t.old_rate_count, t.old_rate_period_ms, t.old_rate_burst))
               ORDER BY mm.dequeue_at, mm.id LIMIT 1
          ) h ON true
         WHERE (t.weight, t.max_concurrency, t.release_interval_ms, t.rate_count, t.rate_period_ms, t.rate_burst)
               IS DISTINCT FROM (t.old_weight, t.old_max_concurrency, t.old_release_interval_ms, t.old_rate_count,
                                 t.old_rate_period_ms, t.old_rate_burst)
            OR t.ordered IS DISTINCT FROM t.old_ordered
            OR cl.n IS NOT NULL
    ), written AS (
        UPDATE lonnymq_channel c
           SET weight = x.weight,
               round_used = CASE WHEN x.weight = c.weight THEN c.round_used ELSE 0 END,
               max_concurrency = x.max_concurrency,
               in_flight = c.in_flight + x.claimed,
               release_interval_ms = x.release_interval_ms,
               rate_count = x.rate_count,
               rate_period_ms = x.rate_period_ms,
               rate_burst = x.rate_burst,
               ordered = x.ordered,
               hold_until = CASE WHEN x.ordered THEN c.hold_until END,
               blocked_by = CASE WHEN x.ordered THEN c.blocked_by END,
               bucket_level = CASE WHEN x.new_rate THEN NULL ELSE c.bucket_level END,
               next_token_at = CASE WHEN x.new_rate THEN NULL ELSE c.next_token_at END,
               next_dequeue_at = CASE WHEN x.head IS NULL THEN c.next_dequeue_at
                                      ELSE least(coalesce(c.next_dequeue_at, x.head),
                                                 greatest(x.head, c.last_dequeue_at + x.release_interval_ms,
                                                          CASE WHEN x.new_rate THEN NULL
                                                               ELSE c.next_token_at END)) END
          FROM changed x
         WHERE c.id = x.id
        RETURNING c.queue
    )
    SELECT pg_catalog.count(*)::integer, pg_catalog.array_agg(DISTINCT w.queue) INTO v_changed, v_queues
      FROM written w;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', q.queue) FROM pg_catalog.unnest(v_queues) AS q(queue);
    RETURN v_changed;
END
$$;

-- Delete a plan no channel follows and no queue gives its new channels. A plan in use is
-- refused (LQ261, DETAIL: "channels,queues"), an unknown one too (LQ260). The row is locked
-- FOR UPDATE first: a channel being given the plan meanwhile (its foreign key check locks
-- the row) is waited for and counted.
CREATE FUNCTION lonnymq_delete_plan_v1(p_name text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_id       bigint;
    v_channels bigint;
    v_queues   bigint;
BEGIN
    PERFORM lonnymq_check_plan_name_v1(p_name);
    SELECT p.id INTO v_id FROM lonnymq_plan p WHERE p.name = p_name FOR UPDATE;
    IF v_id IS NULL THEN
        PERFORM lonnymq_raise_unknown_plan_v1(p_name);
    END IF;
    SELECT pg_catalog.count(*) INTO v_channels FROM lonnymq_channel c WHERE c.plan_id = v_id;
    SELECT pg_catalog.count(*) INTO v_queues FROM lonnymq_queue_plan qp WHERE qp.plan_id = v_id;
    IF v_channels > 0 OR v_queues > 0 THEN
        RAISE EXCEPTION 'plan % is in use: % channel(s) follow it and % queue(s) give it to their new channels',
                        pg_catalog.quote_literal(p_name), v_channels, v_queues
            USING ERRCODE = 'LQ261', DETAIL = pg_catalog.format('%s,%s', v_channels, v_queues);
    END IF;
    DELETE FROM lonnymq_plan p WHERE p.id = v_id;
END
$$;

-- The plan a queue's new channels follow (p_plan NULL: none). Channels that exist keep theirs.
CREATE FUNCTION lonnymq_set_default_plan_v1(p_queue text, p_plan text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_plan IS NULL THEN
        DELETE FROM lonnymq_queue_plan qp WHERE qp.queue = p_queue;
        RETURN;
    END IF;
    PERFORM lonnymq_check_plan_name_v1(p_plan);
    SELECT p.id INTO v_id FROM lonnymq_plan p WHERE p.name = p_plan FOR KEY SHARE;
    IF v_id IS NULL THEN
        PERFORM lonnymq_raise_unknown_plan_v1(p_plan);
    END IF;
    INSERT INTO lonnymq_queue_plan AS qp (queue, plan_id) VALUES (p_queue, v_id)
    ON CONFLICT (queue) DO UPDATE SET plan_id = excluded.plan_id, updated_at = pg_catalog.now();
END
$$;

-- configure_channel with plans: what lonnymq_configure_channel_v3 does (a NULL limit is left
-- as it is, the call's limits are written under the channel's row lock), and
-- - a limit the call sets becomes the channel's own: no plan change touches it;
-- - p_inherit names limits that follow the plan (or the defaults) again: weight,
--   max_concurrency, release_interval, rate;
-- - p_plan: the channel follows that plan (LQ260 when there is none); p_no_plan: no plan.
-- Every limit that is not the channel's own then takes the plan's value (or the default),
-- written through lonnymq_configure_channel_v3, so a cap set counts the running leases and a
-- new rate starts with a full bucket, as there. So does strict order unless the channel set
-- it itself (own_ordered; p_inherit 'ordered' follows the plan again): a channel the plan
-- orders gets ordered after its cap became 1 (a cap other than 1 is refused, LQ001), one
-- that stops being ordered has its hold or block lifted before its cap changes, and is woken. The plan's row is read FOR SHARE before the
-- channel's row is locked (the order lonnymq_configure_plan_v1 takes them in).
CREATE FUNCTION lonnymq_configure_channel_v4(
    p_queue text, p_channel text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_release_interval_ms bigint DEFAULT NULL, p_paused boolean DEFAULT NULL, p_weight integer DEFAULT NULL,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false, p_plan text DEFAULT NULL, p_no_plan boolean DEFAULT false,
    p_inherit text[] DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_id           bigint;
    v_ch           lonnymq_channel%ROWTYPE;
    v_plan         lonnymq_plan%ROWTYPE;
    v_inherit      text[] := coalesce(p_inherit, ARRAY[]::text[]);
    v_set_weight   boolean := p_weight IS NOT NULL;
    v_set_cap      boolean := p_max_concurrency IS NOT NULL OR coalesce(p_unlimited, false);
    v_set_interval boolean := p_release_interval_ms IS NOT NULL;
    v_set_rate     boolean := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL
                              OR coalesce(p_no_rate, false);
    v_own_weight   boolean;
    v_own_cap      boolean;
    v_own_interval boolean;
    v_own_rate     boolean;
    v_weight       integer;
    v_cap          integer;
    v_interval     bigint;
    v_rate_count   integer;
    v_rate_period  bigint;
    v_rate_burst   integer;
    v_own_ordered  boolean;
    v_ordered      boolean;
    v_bad          text;
BEGIN
    PERFORM lonnymq_check_list_v1('inherit', pg_catalog.array_ndims(p_inherit));
    SELECT u.x INTO v_bad FROM pg_catalog.unnest(v_inherit) AS u(x)
     WHERE u.x IS NULL OR u.x NOT IN ('weight', 'max_concurrency', 'release_interval', 'rate', 'ordered') LIMIT 1;
    IF FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('inherit',
                                         'must name weight, max_concurrency, release_interval, rate or ordered',
                                         pg_catalog.quote_nullable(v_bad));
    END IF;
    SELECT u.x INTO v_bad FROM pg_catalog.unnest(v_inherit) AS u(x)
     WHERE (u.x = 'weight' AND v_set_weight) OR (u.x = 'max_concurrency' AND v_set_cap)
        OR (u.x = 'release_interval' AND v_set_interval) OR (u.x = 'rate' AND v_set_rate) LIMIT 1;
    IF FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('inherit', 'cannot name a limit the call also sets', v_bad);
    END IF;
    IF p_plan IS NOT NULL AND coalesce(p_no_plan, false) THEN
        PERFORM lonnymq_raise_invalid_v1('plan', 'cannot be combined with no_plan', pg_catalog.quote_literal(p_plan));
    END IF;
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    IF p_plan IS NOT NULL THEN
        PERFORM lonnymq_check_plan_name_v1(p_plan);
        SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.name = p_plan FOR SHARE;
        IF NOT FOUND THEN
            PERFORM lonnymq_raise_unknown_plan_v1(p_plan);
        END IF;
    ELSIF NOT coalesce(p_no_plan, false) THEN
        SELECT p.* INTO v_plan FROM lonnymq_channel c JOIN lonnymq_plan p ON p.id = c.plan_id
         WHERE c.queue = p_queue AND c.name = p_channel
           FOR SHARE OF p;
    END IF;

    -- The call's own limits (and the pause), with v3's checks; creates the channel if need be
    -- (then with its queue's default plan) and leaves its row locked.
    v_id := lonnymq_configure_channel_v3(p_queue, p_channel, p_max_concurrency, p_unlimited, p_release_interval_ms,
                                         p_paused, p_weight, p_rate_count, p_rate_period_ms, p_rate_burst, p_no_rate);
    SELECT * INTO v_ch FROM lonnymq_channel c WHERE c.id = v_id;
    IF p_plan IS NULL AND NOT coalesce(p_no_plan, false) AND v_ch.plan_id IS DISTINCT FROM v_plan.id THEN
        -- Created just now with its queue's default plan, or given another plan meanwhile.
        SELECT * INTO v_plan FROM lonnymq_plan p WHERE p.id = v_ch.plan_id FOR SHARE;
    END IF;

    v_own_weight := CASE WHEN 'weight' = ANY (v_inherit) THEN false WHEN v_set_weight THEN true ELSE v_ch.own_weight END;
    v_own_cap := CASE WHEN 'max_concurrency' = ANY (v_inherit) THEN false WHEN v_set_cap THEN true
                      ELSE v_ch.own_max_concurrency END;
    v_own_interval := CASE WHEN 'release_interval' = ANY (v_inherit) THEN false WHEN v_set_interval THEN true
                           ELSE v_ch.own_release_interval END;
    v_own_rate := CASE WHEN 'rate' = ANY (v_inherit) THEN false WHEN v_set_rate THEN true ELSE v_ch.own_rate END;
    -- v_plan is all NULL without a plan: the defaults.
    v_weight := CASE WHEN v_own_weight THEN v_ch.weight ELSE coalesce(v_plan.weight, 1) END;
    v_cap := CASE WHEN v_own_cap THEN v_ch.max_concurrency ELSE v_plan.max_concurrency END;
    v_interval := CASE WHEN v_own_interval THEN v_ch.release_interval_ms ELSE coalesce(v_plan.release_interval_ms, 0) END;
    v_rate_count := CASE WHEN v_own_rate THEN v_ch.rate_count ELSE v_plan.rate_count END;
    v_rate_period := CASE WHEN v_own_rate THEN v_ch.rate_period_ms ELSE v_plan.rate_period_ms END;
    v_rate_burst := CASE WHEN v_own_rate THEN v_ch.rate_burst ELSE v_plan.rate_burst END;
    v_own_ordered := CASE WHEN 'ordered' = ANY (v_inherit) THEN false ELSE v_ch.own_ordered END;
    v_ordered := CASE WHEN v_own_ordered THEN v_ch.ordered ELSE coalesce(v_plan.ordered, false) END;
    IF v_ordered AND v_cap IS DISTINCT FROM 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency',
            CASE WHEN v_own_ordered THEN 'must stay 1 while the channel is ordered (configure_channel(ordered=False) first)'
                 ELSE pg_catalog.format('must be 1: plan %s orders the channel (let its cap follow the plan, '
                                        'or configure_channel(..., ordered=False) first)',
                                        pg_catalog.quote_literal(v_plan.name)) END,
            coalesce(v_cap::text, 'null'));
    END IF;

    UPDATE lonnymq_channel c
       SET plan_id = v_plan.id,
           own_weight = v_own_weight,
           own_max_concurrency = v_own_cap,
           own_release_interval = v_own_interval,
           own_rate = v_own_rate,
           own_ordered = v_own_ordered,
           -- Stops being ordered: before its cap may change (lonnymq_channel_ordered_one_at_a_time).
           ordered = v_ordered AND c.ordered,
           hold_until = CASE WHEN v_ordered THEN c.hold_until END,
           blocked_by = CASE WHEN v_ordered THEN c.blocked_by END
     WHERE c.id = v_id
       AND (c.plan_id, c.own_weight, c.own_max_concurrency, c.own_release_interval, c.own_rate, c.own_ordered,
            c.ordered AND NOT v_ordered)
           IS DISTINCT FROM (v_plan.id, v_own_weight, v_own_cap, v_own_interval, v_own_rate, v_own_ordered, false);
    IF (v_weight, v_cap, v_interval, v_rate_count, v_rate_period, v_rate_burst)
       IS DISTINCT FROM (v_ch.weight, v_ch.max_concurrency, v_ch.release_interval_ms, v_ch.rate_count,
                         v_ch.rate_period_ms, v_ch.rate_burst) THEN
        -- The limits that follow the plan (or the defaults) and differ: only those, so an
        -- unchanged rate keeps its bucket.
        PERFORM lonnymq_configure_channel_v3(
            p_queue, p_channel,
            CASE WHEN v_cap IS DISTINCT FROM v_ch.max_concurrency THEN v_cap END,
            v_cap IS NULL AND v_ch.max_concurrency IS NOT NULL,
            CASE WHEN v_interval <> v_ch.release_interval_ms THEN v_interval END,
            NULL::boolean,
            CASE WHEN v_weight <> v_ch.weight THEN v_weight END,
            CASE WHEN (v_rate_count, v_rate_period, v_rate_burst)
                      IS DISTINCT FROM (v_ch.rate_count, v_ch.rate_period_ms, v_ch.rate_burst) THEN v_rate_count END,
            CASE WHEN (v_rate_count, v_rate_period, v_rate_burst)
                      IS DISTINCT FROM (v_ch.rate_count, v_ch.rate_period_ms, v_ch.rate_burst) THEN v_rate_period END,
            CASE WHEN (v_rate_count, v_rate_period, v_rate_burst)
                      IS DISTINCT FROM (v_ch.rate_count, v_ch.rate_period_ms, v_ch.rate_burst) THEN v_rate_burst END,
            v_rate_count IS NULL AND v_ch.rate_count IS NOT NULL);
    END IF;
    IF v_ordered AND NOT v_ch.ordered THEN
        UPDATE lonnymq_channel c SET ordered = true WHERE c.id = v_id;
    ELSIF v_ch.ordered AND NOT v_ordered AND lonnymq_wake_v1(v_id, lonnymq_now_ms_v1(), 0::bigint) THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_id;
END
$$;

-- Set or change a queue's queue-wide limits: a NULL argument leaves that limit as it is
-- (p_unlimited removes the cap, p_no_rate the bucket); with no limit left the queue's row
-- is deleted and its dequeues pay nothing again, unless the queue is paused (the row then
-- keeps the pause alone). The row is locked (or created) first.
-- Setting a cap where there was none counts the queue's leases already running (claimed
-- with SKIP LOCKED: a locked one is leaving flight, and waiting on it could deadlock with
-- its ack), so the cap holds at once. A new or changed rate starts with a full bucket.
-- Returns whether the queue has a limit now.
CREATE FUNCTION lonnymq_configure_queue_v1(
    p_queue text, p_max_concurrency integer DEFAULT NULL, p_unlimited boolean DEFAULT false,
    p_rate_count integer DEFAULT NULL, p_rate_period_ms bigint DEFAULT NULL, p_rate_burst integer DEFAULT NULL,
    p_no_rate boolean DEFAULT false
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_old      lonnymq_queue_config%ROWTYPE;
    v_new_rate boolean;
    v_max      integer;
    v_count    integer;
    v_period   bigint;
    v_burst    integer;
    v_in_flight integer;
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_max_concurrency IS NOT NULL AND p_max_concurrency < 1 THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'must be positive or null (unlimited)', p_max_concurrency::text);
    END IF;
    IF p_max_concurrency IS NOT NULL AND coalesce(p_unlimited, false) THEN
        PERFORM lonnymq_raise_invalid_v1('max_concurrency', 'cannot be combined with unlimited', p_max_concurrency::text);
    END IF;
    v_new_rate := p_rate_count IS NOT NULL OR p_rate_period_ms IS NOT NULL OR p_rate_burst IS NOT NULL;
    IF v_new_rate THEN
        IF coalesce(p_no_rate, false) THEN
            PERFORM lonnymq_raise_invalid_v1('rate', 'cannot be combined with no_rate', p_rate_count::text);
        END IF;
        PERFORM lonnymq_check_range_v1('rate_count', p_rate_count::bigint, 1::bigint, 1000000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_period_ms', p_rate_period_ms, 1::bigint, 31622400000::bigint, false);
        PERFORM lonnymq_check_range_v1('rate_burst', p_rate_burst::bigint, 1::bigint, 1000000::bigint, false);
    END IF;
    -- Two first configurations of one queue must not both count its leases: the second
    -- waits for the first (an advisory lock on the queue's name, beside the channels' ones).
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1() + 1, pg_catalog.hashtext(p_queue));
    SELECT * INTO v_old FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
    v_max := CASE WHEN coalesce(p_unlimited, false) THEN NULL
                  ELSE coalesce(p_max_concurrency, v_old.max_concurrency) END;
    v_count := CASE WHEN v_new_rate THEN p_rate_count WHEN p_no_rate THEN NULL ELSE v_old.rate_count END;
    v_period := CASE WHEN v_new_rate THEN p_rate_period_ms WHEN p_no_rate THEN NULL ELSE v_old.rate_period_ms END;
    v_burst := CASE WHEN v_new_rate THEN p_rate_burst WHEN p_no_rate THEN NULL ELSE v_old.rate_burst END;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    IF v_max IS NULL AND v_count IS NULL AND v_old.paused IS NOT TRUE THEN
        DELETE FROM lonnymq_queue_config qc WHERE qc.queue = p_queue;
        RETURN false;
    END IF;
    IF v_max IS NULL THEN
        v_in_flight := 0;
    ELSIF v_old.max_concurrency IS NULL THEN
        UPDATE lonnymq_message m SET queue_slot = true
         WHERE m.id IN (SELECT mm.id FROM lonnymq_message mm
                          JOIN lonnymq_channel c ON c.id = mm.channel_id
                         WHERE mm.lease_until IS NOT NULL AND c.queue = p_queue AND NOT mm.queue_slot
                           FOR UPDATE OF mm SKIP LOCKED);
        -- A new statement: it sees the leases just claimed and those flagged before (an ack
        -- of one of these that is under way gives its slot back after this commits).
        SELECT coalesce(pg_catalog.sum(m.slots), 0)::integer INTO v_in_flight
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.queue_slot AND c.queue = p_queue;
    ELSE
        v_in_flight := v_old.in_flight;
    END IF;
    INSERT INTO lonnymq_queue_config AS qc (queue, max_concurrency, rate_count, rate_period_ms, rate_burst, in_flight,
                                            paused)
    VALUES (p_queue, v_max, v_count, v_period, v_burst, v_in_flight, coalesce(v_old.paused, false))
    ON CONFLICT (queue) DO UPDATE
       SET max_concurrency = excluded.max_concurrency,
           rate_count = excluded.rate_count,
           rate_period_ms = excluded.rate_period_ms,
           rate_burst = excluded.rate_burst,
           in_flight = excluded.in_flight,
           bucket_level = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE qc.bucket_level END,
           next_token_at = CASE WHEN v_new_rate OR p_no_rate THEN NULL ELSE qc.next_token_at END,
           updated_at = pg_catalog.now();
    RETURN v_max IS NOT NULL OR v_count IS NOT NULL;
END
$$;

-- Pause (p_paused) or resume a whole queue: its dequeues release nothing while it is paused;
-- enqueues, publishes and schedule ticks still write, and running messages finish. A queue
-- is a name: pausing one nothing has used yet is allowed (it is paused when work comes).
-- The pause lives on the queue's lonnymq_queue_config row (created if missing); resuming
-- deletes the row when it holds no limit, so an unpaused queue without limits costs its
-- dequeues one index probe, as before. Serialized with configure_queue (the same advisory
-- lock, then the row lock, which waits for a dequeue holding it). Resuming wakes idle
-- workers. Returns whether the state changed.
CREATE FUNCTION lonnymq_pause_queue_v1(p_queue text, p_paused boolean) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_old lonnymq_queue_config%ROWTYPE;
BEGIN
    IF p_queue IS NULL OR pg_catalog.char_length(p_queue) NOT BETWEEN 1 AND 100 OR p_queue !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('queue', 'must be 1 to 100 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_queue));
    END IF;
    IF p_paused IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('paused', 'must be true or false', 'NULL');
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1() + 1, pg_catalog.hashtext(p_queue));
    SELECT * INTO v_old FROM lonnymq_queue_config qc WHERE qc.queue = p_queue FOR NO KEY UPDATE;
    IF coalesce(v_old.paused, false) = p_paused THEN
        RETURN false;
    END IF;
    IF p_paused THEN
        INSERT INTO lonnymq_queue_config AS qc (queue, paused) VALUES (p_queue, true)
        ON CONFLICT (queue) DO UPDATE SET paused = true, updated_at = pg_catalog.now();
        RETURN true;
    END IF;
    IF v_old.max_concurrency IS NULL AND v_old.rate_count IS NULL THEN
        DELETE FROM lonnymq_queue_config qc WHERE qc.queue = p_queue;
    ELSE
        UPDATE lonnymq_queue_config qc SET paused = false, updated_at = pg_catalog.now()
         WHERE qc.queue = p_queue;
    END IF;
    PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    RETURN true;
END
$$;

-- Delete a channel only while it holds no message and no enqueue into it is in flight.
-- Returns 'deleted', 'not_empty', 'busy' (a producer or dequeuer holds it: try again) or
-- 'missing'. Dead messages keep their queue and channel names (requeue recreates the
-- channel). The emptiness test is the only guard (lonnymq_message has no foreign key since
-- 0036): it runs after both locks, on a snapshot that sees every message committed before
-- them, which needs READ COMMITTED (LQ006 otherwise; docs/locking.md "Pruning a channel").
CREATE FUNCTION lonnymq_delete_channel_v1(p_id bigint) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'delete_channel needs READ COMMITTED, the session runs %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'LQ006';
    END IF;
    PERFORM 1 FROM lonnymq_channel c WHERE c.id = p_id;
    IF NOT FOUND THEN
        RETURN 'missing';
    END IF;
    SELECT c.id INTO v_id FROM lonnymq_channel c WHERE c.id = p_id FOR UPDATE SKIP LOCKED;
    IF v_id IS NULL
       OR NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(p_id))
       OR NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_stripe_lock_ns_v1(), lonnymq_stripe_key_v1(p_id)) THEN
        RETURN 'busy';
    END IF;
    IF EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = p_id AND m.lease_until IS NULL)
       OR EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = p_id) THEN
        RETURN 'not_empty';
    END IF;
    -- Its wake-up marks too: dequeues apply marks through the channel row, so a deleted
    -- channel's marks would otherwise stay forever.
    DELETE FROM lonnymq_wake w WHERE w.channel_id = p_id;
    DELETE FROM lonnymq_release_count r WHERE r.channel_id = p_id;
    DELETE FROM lonnymq_channel c WHERE c.id = p_id;
    RETURN 'deleted';
END
$$;

-- Whether a user set something on this channel that pruning would lose: a concurrency cap,
-- a release interval, a weight, a token bucket, a pause, a plan. The one place that says what
-- "configured" means: a new per-channel setting adds its test here.
CREATE FUNCTION lonnymq_channel_configured_v1(c lonnymq_channel) RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.max_concurrency IS NOT NULL
        OR c.release_interval_ms <> 0::bigint
        OR c.weight <> 1
        OR c.rate_count IS NOT NULL
        OR c.paused
        OR c.plan_id IS NOT NULL
$$;

-- Delete up to p_limit channels (each holds an advisory lock until the statement ends, from
-- the server's shared lock table: the workers ask for 200) that nobody configured (lonnymq_channel_configured_v1), that
-- hold no message in any state and no dedup key, and that were neither created nor released
-- from in the last p_idle_ms (LONNYMQ_CHANNEL_IDLE_PRUNE; the workers' housekeeping calls
-- this). Their wake-up marks and release counts go with them; their releases are added to
-- lonnymq_queue_released. Returns how many it deleted. Never waits for a producer or a
-- dequeuer: a channel one of them holds is skipped, for a later call.
-- Candidates are parked channels (next_dequeue_at NULL: a dequeue found them empty, or they
-- are new): a cheap test that spares the probes of the message table for every channel with
-- a backlog (a channel with a turn is pruned once a dequeue has parked it).
-- Locking (docs/locking.md, "Pruning a channel"): 1. the candidates' rows FOR UPDATE SKIP
-- LOCKED (a producer with an uncommitted message holds KEY SHARE on its channel, dequeuers
-- and configure hold NO KEY UPDATE: all skipped), then each one's exclusive advisory lock,
-- tried (a producer between its lookup and its insert holds it shared: skipped); 2. in a new
-- statement (a snapshot taken after both locks), the delete tests emptiness again, so a
-- message committed after the first statement's snapshot keeps its channel. That second
-- look is the only guard (lonnymq_message has no foreign key since 0036), and it needs READ
-- COMMITTED for its fresh snapshot: LQ006 otherwise, as dequeue. Emptiness is a probe of
-- the ready index and a look along the lease index (messages in flight: a few per worker).
CREATE FUNCTION lonnymq_prune_channels_v1(p_idle_ms bigint, p_limit integer DEFAULT 200)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_cutoff_ms bigint;
    v_cutoff_at timestamptz;
    v_locked    bigint[];
    v_gone      integer;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'prune needs READ COMMITTED, the session runs %', pg_catalog.current_setting('transaction_isolation')
            USING ERRCODE = 'LQ006';
    END IF;
    PERFORM lonnymq_check_range_v1('idle', p_idle_ms, 1::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 10000::bigint, false);
    v_cutoff_ms := lonnymq_now_ms_v1() - p_idle_ms;
    v_cutoff_at := pg_catalog.clock_timestamp()
                   - pg_catalog.make_interval(secs => p_idle_ms::double precision / 1000::double precision);

    SELECT pg_catalog.array_agg(k.id ORDER BY k.id) INTO v_locked
      FROM (SELECT c.id FROM lonnymq_channel c
             WHERE c.next_dequeue_at IS NULL
               AND c.created_at < v_cutoff_at
               AND (c.last_dequeue_at IS NULL OR c.last_dequeue_at < v_cutoff_ms)
               AND NOT lonnymq_channel_configured_v1(c)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = c.id AND m.lease_until IS NULL)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = c.id)
               AND NOT EXISTS (SELECT 1 FROM lonnymq_dedup d WHERE d.channel_id = c.id)
             LIMIT p_limit
               FOR UPDATE OF c SKIP LOCKED) k
     WHERE pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), lonnymq_lock_key_v1(k.id))
       AND pg_catalog.pg_try_advisory_xact_lock(lonnymq_stripe_lock_ns_v1(), lonnymq_stripe_key_v1(k.id));
    IF v_locked IS NULL THEN
        RETURN 0;
    END IF;

    WITH gone AS (
        DELETE FROM lonnymq_channel c
         WHERE c.id = ANY (v_locked)
           AND NOT lonnymq_channel_configured_v1(c)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.channel_id = c.id AND m.lease_until IS NULL)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.lease_until IS NOT NULL AND m.channel_id = c.id)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_dedup d WHERE d.channel_id = c.id)
        RETURNING c.id, c.queue, c.released_total
    ), marks AS (
        DELETE FROM lonnymq_wake w WHERE w.channel_id IN (SELECT g.id FROM gone g)
    ), counts AS (
        DELETE FROM lonnymq_release_count r WHERE r.channel_id IN (SELECT g.id FROM gone g)
        RETURNING r.channel_id, r.released
    ), folded AS (
        INSERT INTO lonnymq_queue_released AS q (queue, released)
        SELECT t.queue, pg_catalog.sum(t.n)::bigint
          FROM (SELECT g.queue, g.released_total AS n FROM gone g
                UNION ALL
                SELECT g.queue, r.released FROM counts r JOIN gone g ON g.id = r.channel_id) t
         GROUP BY t.queue
        HAVING pg_catalog.sum(t.n) > 0::numeric
         ORDER BY t.queue
        ON CONFLICT (queue) DO UPDATE SET released = q.released + excluded.released
    )
    SELECT pg_catalog.count(*)::integer INTO v_gone FROM gone;
    RETURN v_gone;
END
$$;

-- Delete dead messages for good. Returns the ids deleted.
CREATE FUNCTION lonnymq_purge_dead_v1(p_ids bigint[]) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    WITH gone AS (
        DELETE FROM lonnymq_dead_message d WHERE d.id = ANY (p_ids) RETURNING d.id
    )
    SELECT coalesce(pg_catalog.array_agg(gone.id ORDER BY gone.id), ARRAY[]::bigint[]) INTO v_ids FROM gone;
    RETURN v_ids;
END
$$;

-- Scheduler invariants, for tests, api.check() and the health command. One row per problem:
--   in_flight_mismatch: in_flight differs from the leases that took a slot;
--   queue_in_flight_mismatch: a queue-wide cap's in_flight differs from the leases of the
--     queue that took a queue slot (channel_id and channel NULL);
--   stranded: a ready message is due but its channel will not look at it;
--   orphaned: messages whose channel row is missing (channel_id the missing id, queue and
--     channel NULL): lonnymq_message has no foreign key (0036), and this proves what it did.
--     The channels are read from the two message indexes (the ready index by skipping from
--     one channel to the next, the lease index whole), not from the backlog.
--   channel_key_mismatch: a channel and its identity in lonnymq_channel_key disagree (one
--     without the other, another name, an id on two channel rows): the key holds the
--     channel's unique (queue, name) since 0059, and this proves it holds every channel's.
-- Its work does not grow with the backlog (docs/admin.md, "At size"): the leases are read
-- along the lease index (a slot or a queue slot needs a lease: CHECKs of lonnymq_message),
-- and only the channels that could be stranded have their head looked up: a channel whose
-- turn is at most now + grace away cannot be (the turn it waits for has come, or is within
-- grace), so the one-probe-per-channel walk is over the parked channels (no turn) and those
-- whose turn is further off. One clock reading serves the whole check.
CREATE FUNCTION lonnymq_check_v2(p_grace_ms bigint DEFAULT 1000)
RETURNS TABLE (channel_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint;
BEGIN
    PERFORM lonnymq_check_range_v1('grace', p_grace_ms, 0::bigint, 86400000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    RETURN QUERY
        SELECT c.id, c.queue, c.name, 'in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', c.in_flight, coalesce(s.n, 0))
          FROM lonnymq_channel c
          LEFT JOIN (SELECT m.channel_id, pg_catalog.sum(m.slots) AS n FROM lonnymq_message m
                      WHERE m.lease_until IS NOT NULL AND m.slot_taken
                      GROUP BY m.channel_id) s ON s.channel_id = c.id
         WHERE c.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT NULL::bigint, qc.queue, NULL::text, 'queue_in_flight_mismatch',
               pg_catalog.format('in_flight=%s, slot-taking leases=%s', qc.in_flight, coalesce(s.n, 0))
          FROM lonnymq_queue_config qc
          LEFT JOIN (SELECT c.queue, pg_catalog.sum(m.slots) AS n
                       FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
                      WHERE m.lease_until IS NOT NULL AND m.queue_slot
                      GROUP BY c.queue) s ON s.queue = qc.queue
         WHERE qc.max_concurrency IS NOT NULL AND qc.in_flight <> coalesce(s.n, 0)
        UNION ALL
        SELECT c.id, c.queue, c.name, 'stranded',
               pg_catalog.format('head due at %s, next_dequeue_at=%s', h.dequeue_at, coalesce(c.next_dequeue_at::text, 'null'))
          FROM lonnymq_channel c
          CROSS JOIN LATERAL (SELECT mm.dequeue_at FROM lonnymq_message mm
                               WHERE mm.channel_id = c.id AND mm.lease_until IS NULL
                               ORDER BY mm.dequeue_at, mm.id LIMIT 1) h
         WHERE NOT c.paused
           -- The candidates, from the channel row alone (implied by the turn's test below,
           -- whose greatest() is at least now).
           AND (c.next_dequeue_at IS NULL OR c.next_dequeue_at > v_now + p_grace_ms)
           AND h.dequeue_at < v_now - p_grace_ms
           -- Its next turn is missing, or later than the head (and the rate limit) need and
           -- still ahead: a turn that has already come is eligible now, however old the head.
           AND (c.next_dequeue_at IS NULL
                OR c.next_dequeue_at > greatest(h.dequeue_at, c.last_dequeue_at + c.release_interval_ms,
                                                c.next_token_at, c.hold_until, v_now) + p_grace_ms)
           -- A producer's committed wake-up mark is applied by the next dequeue.
           AND NOT EXISTS (SELECT 1 FROM lonnymq_wake w
                            WHERE w.channel_id = c.id
                              AND w.dequeue_at <= greatest(h.dequeue_at, v_now) + p_grace_ms)
        UNION ALL
        SELECT o.channel_id, NULL::text, NULL::text, 'orphaned',
               pg_catalog.format('%s message(s) of channel %s, which does not exist',
                                 (SELECT pg_catalog.count(*) FROM lonnymq_message m
                                   WHERE m.channel_id = o.channel_id AND m.lease_until IS NULL)
                                 + (SELECT pg_catalog.count(*) FROM lonnymq_message m
                                     WHERE m.lease_until IS NOT NULL AND m.channel_id = o.channel_id),
                                 o.channel_id)
          FROM (WITH RECURSIVE waiting(channel_id) AS (
                    (SELECT m.channel_id FROM lonnymq_message m WHERE m.lease_until IS NULL
                      ORDER BY m.channel_id LIMIT 1)
                    UNION ALL
                    SELECT (SELECT m.channel_id FROM lonnymq_message m
                             WHERE m.lease_until IS NULL AND m.channel_id > w.channel_id
                             ORDER BY m.channel_id LIMIT 1)
                      FROM waiting w WHERE w.channel_id IS NOT NULL
                )
                SELECT w.channel_id FROM waiting w WHERE w.channel_id IS NOT NULL
                UNION
                SELECT m.channel_id FROM lonnymq_message m WHERE m.lease_until IS NOT NULL) o
         WHERE NOT EXISTS (SELECT 1 FROM lonnymq_channel c WHERE c.id = o.channel_id)
        UNION ALL
        SELECT coalesce(c.id, k.id), coalesce(c.queue, k.queue), coalesce(c.name, k.name), 'channel_key_mismatch',
               CASE WHEN k.id IS NULL THEN 'the channel has no row in lonnymq_channel_key'
                    WHEN c.id IS NULL THEN 'a row of lonnymq_channel_key without its channel'
                    WHEN c.n > 1 THEN pg_catalog.format('%s channel rows have this id', c.n)
                    ELSE pg_catalog.format('its key names %s/%s', k.queue, k.name) END
          FROM (SELECT c.id, pg_catalog.min(c.queue) AS queue, pg_catalog.min(c.name) AS name,
                       pg_catalog.count(*) AS n
                  FROM lonnymq_channel c GROUP BY c.id) c
          FULL JOIN lonnymq_channel_key k ON k.id = c.id
         WHERE c.id IS NULL OR k.id IS NULL OR c.n > 1 OR c.queue <> k.queue OR c.name <> k.name;
END
$$;

-- Channels whose limits drifted from where they come from: one row per limit that is not
-- the channel's own and differs from its plan's value (or, without a plan, the default);
-- strict order (ordered) counts as one.
-- lonnymq_check_v2's companion (the named statement check runs both). The channel row's own
-- columns pick the drifted channels first (typed comparisons, true for every row the text
-- comparison below reports); only those are spelled out limit by limit.
CREATE FUNCTION lonnymq_check_limits_v2()
RETURNS TABLE (channel_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
SET jit = off
AS $$
    SELECT c.id, c.queue, c.name, 'limit_drift'::text,
           pg_catalog.format('%s=%s, but %s gives %s', v.lim, coalesce(v.actual, 'null'),
                             CASE WHEN p.id IS NULL THEN 'the default'
                                  ELSE 'plan ' || pg_catalog.quote_literal(p.name) END,
                             coalesce(v.expected, 'null'))
      FROM lonnymq_channel c
      LEFT JOIN lonnymq_plan p ON p.id = c.plan_id
     CROSS JOIN LATERAL (VALUES
        ('weight', NOT c.own_weight, c.weight::text, coalesce(p.weight, 1)::text),
        ('max_concurrency', NOT c.own_max_concurrency, c.max_concurrency::text, p.max_concurrency::text),
        ('release_interval_ms', NOT c.own_release_interval, c.release_interval_ms::text,
         coalesce(p.release_interval_ms, 0)::text),
        ('rate', NOT c.own_rate,
         NULLIF(pg_catalog.concat_ws('/', c.rate_count, c.rate_period_ms, c.rate_burst), ''),
         NULLIF(pg_catalog.concat_ws('/', p.rate_count, p.rate_period_ms, p.rate_burst), '')),
        ('ordered', NOT c.own_ordered, c.ordered::text, coalesce(p.ordered, false)::text)
     ) AS v(lim, inherited, actual, expected)
     WHERE ((NOT c.own_weight AND c.weight IS DISTINCT FROM coalesce(p.weight, 1))
            OR (NOT c.own_max_concurrency AND c.max_concurrency IS DISTINCT FROM p.max_concurrency)
            OR (NOT c.own_release_interval
                AND c.release_interval_ms IS DISTINCT FROM coalesce(p.release_interval_ms, 0::bigint))
            OR (NOT c.own_rate AND (c.rate_count, c.rate_period_ms, c.rate_burst)
                                   IS DISTINCT FROM (p.rate_count, p.rate_period_ms, p.rate_burst))
            OR (NOT c.own_ordered AND c.ordered IS DISTINCT FROM coalesce(p.ordered, false)))
       AND v.inherited AND v.actual IS DISTINCT FROM v.expected
$$;

-- ---------------------------------------------------------------------------------------
-- Periodic schedules (django_lonnymq.schedules computes the ticks; these write them)
-- ---------------------------------------------------------------------------------------

-- Enqueue the due ticks of one schedule and write its next tick, in the caller's transaction,
-- which claimed the row (named query claim_schedules: FOR UPDATE SKIP LOCKED). Each tick's
-- message runs at the tick and carries the dedup key 'lonnymq.periodic:<id>:<tick ms>', so
-- even a tick computed twice is enqueued once. Nothing happens (NULL) when the row is gone or
-- its next tick is no longer p_claimed_at (it was fired or edited meanwhile). p_error parks a
-- schedule whose timing cannot be computed: no tick, next_tick_at NULL, the error kept.
-- Returns the ids of the tick messages (existing ids where a tick was enqueued already).
CREATE FUNCTION lonnymq_fire_schedule_v1(
    p_id                    bigint,
    p_claimed_at            bigint,
    p_ticks                 bigint[],
    p_next_tick_at          bigint,
    p_error                 text,
    p_default_max_attempts  integer,
    p_priority_step_ms      bigint,
    p_tolerance_ms          bigint
) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schedule lonnymq_schedule%ROWTYPE;
    v_tick     bigint;
    v_ids      bigint[] := '{}';
BEGIN
    PERFORM lonnymq_check_list_v1('ticks', pg_catalog.array_ndims(p_ticks));
    PERFORM lonnymq_check_range_v1('next_tick_at', p_next_tick_at, 0::bigint, 253402300799999::bigint, true);
    SELECT * INTO v_schedule FROM lonnymq_schedule s WHERE s.id = p_id FOR UPDATE;
    IF NOT FOUND OR v_schedule.next_tick_at IS DISTINCT FROM p_claimed_at THEN
        RETURN NULL;
    END IF;
    FOREACH v_tick IN ARRAY coalesce(p_ticks, '{}'::bigint[]) LOOP
        v_ids := pg_catalog.array_append(v_ids, lonnymq_enqueue_v3(
            v_schedule.queue, v_schedule.channel, v_schedule.payload, v_tick, NULL::bigint, 0,
            'lonnymq.periodic:' || v_schedule.id::text || ':' || v_tick::text, 'skip'::text,
            coalesce(v_schedule.max_attempts, p_default_max_attempts), p_priority_step_ms, p_tolerance_ms, 1));
    END LOOP;
    UPDATE lonnymq_schedule s
       SET next_tick_at = p_next_tick_at,
           last_tick_at = coalesce((SELECT pg_catalog.max(t) FROM pg_catalog.unnest(p_ticks) AS t), s.last_tick_at),
           last_message_id = coalesce(v_ids[pg_catalog.array_length(v_ids, 1)], s.last_message_id),
           last_error = p_error
     WHERE s.id = p_id;
    RETURN v_ids;
END
$$;

-- Make the schedules declared in code what the table holds, when a worker starts: a new name
-- is added, a changed declaration replaces the row's definition (its next tick too; a pause
-- stays), an unchanged one keeps the row as it is (edits made in the admin, the next tick, so
-- ticks missed while no worker ran are caught up), and a declared row of p_queues (NULL:
-- every queue) whose name is no longer declared is deleted. A declared row of another queue
-- is never deleted, so workers whose code declares different schedules (other handler
-- modules) do not undo each other's; new and changed declarations of any queue are written.
-- Rows added in the admin (declared NULL) are left alone unless a declaration takes their
-- name. p_next_tick_ats: each declaration's first tick from now. Concurrent syncs run one at
-- a time (an advisory lock).
CREATE FUNCTION lonnymq_sync_schedules_v2(p_queues text[], p_names text[], p_declared jsonb[],
                                          p_next_tick_ats bigint[])
RETURNS TABLE (added integer, changed integer, removed integer)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_added   integer;
    v_changed integer;
    v_removed integer;
BEGIN
    PERFORM lonnymq_check_list_v1('queues', pg_catalog.array_ndims(p_queues));
    PERFORM lonnymq_check_list_v1('names', pg_catalog.array_ndims(p_names));
    PERFORM lonnymq_check_list_v1('declared', pg_catalog.array_ndims(p_declared));
    PERFORM lonnymq_check_list_v1('next_tick_ats', pg_catalog.array_ndims(p_next_tick_ats));
    IF coalesce(pg_catalog.array_length(p_names, 1), 0) <> coalesce(pg_catalog.array_length(p_declared, 1), 0)
       OR coalesce(pg_catalog.array_length(p_names, 1), 0) <> coalesce(pg_catalog.array_length(p_next_tick_ats, 1), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('declared', 'must have one entry per name',
                                         pg_catalog.format('%s names', coalesce(pg_catalog.array_length(p_names, 1), 0)));
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_lock_ns_v1(), -160);

    DELETE FROM lonnymq_schedule s
     WHERE s.declared IS NOT NULL AND NOT (s.name = ANY (coalesce(p_names, '{}'::text[])))
       AND (p_queues IS NULL OR s.queue = ANY (p_queues));
    GET DIAGNOSTICS v_removed = ROW_COUNT;

    WITH written AS (
        INSERT INTO lonnymq_schedule AS s (name, queue, channel, cron, every_ms, timezone, payload, catch_up,
                                           max_attempts, next_tick_at, declared)
        SELECT d.name, d.declared OPERATOR(pg_catalog.->>) 'queue'::text,
               d.declared OPERATOR(pg_catalog.->>) 'channel'::text, d.declared OPERATOR(pg_catalog.->>) 'cron'::text,
               (d.declared OPERATOR(pg_catalog.->>) 'every_ms'::text)::bigint,
               d.declared OPERATOR(pg_catalog.->>) 'timezone'::text, d.declared OPERATOR(pg_catalog.->) 'payload'::text,
               (d.declared OPERATOR(pg_catalog.->>) 'catch_up'::text)::integer,
               (d.declared OPERATOR(pg_catalog.->>) 'max_attempts'::text)::integer,
               d.next_tick_at, d.declared
          FROM ROWS FROM (pg_catalog.unnest(p_names), pg_catalog.unnest(p_declared),
                         pg_catalog.unnest(p_next_tick_ats)) AS d(name, declared, next_tick_at)
            ON CONFLICT (name) DO UPDATE
           SET queue = excluded.queue, channel = excluded.channel, cron = excluded.cron,
               every_ms = excluded.every_ms, timezone = excluded.timezone, payload = excluded.payload,
               catch_up = excluded.catch_up, max_attempts = excluded.max_attempts,
               next_tick_at = excluded.next_tick_at, declared = excluded.declared, last_error = NULL
         WHERE s.declared IS DISTINCT FROM excluded.declared
        RETURNING (s.xmax OPERATOR(pg_catalog.=) '0'::xid) AS inserted
    )
    SELECT pg_catalog.count(*) FILTER (WHERE w.inserted), pg_catalog.count(*) FILTER (WHERE NOT w.inserted)
      INTO v_added, v_changed
      FROM written w;
    RETURN QUERY SELECT v_added, v_changed, v_removed;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Figures for operators (admin, dashboard, lonnymq_stats, metrics): read only, except
-- lonnymq_record_samples_v3 and lonnymq_record_samples_due_v2, which write the history table
-- ---------------------------------------------------------------------------------------

-- Figures per queue (all queues when p_queues is NULL), exact up to p_cap waiting messages
-- and estimated past it: `estimated` is true for a queue with more than p_cap waiting
-- messages or dead letters, or more than p_cap / 10 channels (its counts then come from a
-- sample, which is the whole table when the table has no more pages than the sample reads).
-- A paused channel's waiting messages count as paused only: never ready, never scheduled,
-- and never the oldest ready.
-- Cost, bounded whatever the backlog (docs/admin.md, "Figures at size"); K below is
-- GREATEST(p_cap / 100, 100):
-- - waiting messages (ready, scheduled, paused): each queue's first p_cap / 10 channels are
--   walked along the ready index (channel_id, dequeue_at, id) until p_cap + 1 entries are
--   read. A queue with at most p_cap / 10 channels and p_cap waiting messages is counted
--   exactly. Past either bound each figure is estimated from a TABLESAMPLE SYSTEM of about
--   K pages of the message table, scaled by the table's current size (pg_relation_size),
--   and is never less than what the walk counted. SYSTEM sampling reads whole pages, so a
--   queue that holds a small share of a large table, in few pages, is estimated roughly.
--   The sampled rows are told apart by their channel: with one estimated queue, by the few
--   channels that are not its own unpaused ones.
-- - oldest ready: exact for a queue counted exactly (the walk reads every channel's first
--   entry). An estimated queue: the oldest first entry of the K channels next in turn (the
--   eligible index) and of the K at their concurrency cap with the earliest turn, the
--   channels a backlog has kept waiting longest, without one probe per channel; a channel
--   waiting for its rate limit may hold an older ready message.
-- - in flight: exact, along the lease index (messages in flight only).
-- - dead: counted along the (queue, died_at) index up to p_cap + 1; past it estimated from a
--   sample of the dead-letter table in the same way (never less than p_cap + 1).
-- - channels, paused channels, released_total: exact, from the channel rows, plus
--   lonnymq_release_count and the pruned channels' releases (lonnymq_queue_released), so
--   released_total never falls when a channel is pruned; a queue whose channels were all
--   pruned keeps its row.
CREATE FUNCTION lonnymq_queue_stats_v3(p_queues text[] DEFAULT NULL, p_cap bigint DEFAULT 100000)
RETURNS TABLE (id bigint, queue text, at timestamptz, channels bigint, paused_channels bigint,
               ready bigint, scheduled bigint, in_flight bigint, dead bigint, oldest_ready_ms bigint,
               released_total bigint, paused bigint, estimated boolean)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
-- The planner prices the bounded walks as if they read every channel's range: JIT compiling
-- a statement for that took a second at 100,000 channels, and a parallel plan ran the sample
-- once per worker. The walk reads each channel in index order and stops at its limit: a
-- bitmap scan and a sort, which a custom plan chose for channels it knew to be small, read
-- every entry of each channel it visits (0047_stats_walk_in_index_order).
SET jit = off
SET max_parallel_workers_per_gather = 0
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint;
    v_heads bigint;
    v_max_channels bigint;
    v_pct double precision := 100;
    v_dead_pct double precision := 100;
    -- One entry per queue that has channels, in queue order.
    v_queues text[];
    v_channels bigint[];
    v_paused_channels bigint[];
    v_released numeric[];
    v_walked bigint[];
    v_ready bigint[];
    v_scheduled bigint[];
    v_paused bigint[];
    v_head bigint[];
    v_big text[];
    -- Queues past the bounds: their sampled counts, unscaled.
    v_s_queues text[];
    v_s_ready bigint[];
    v_s_scheduled bigint[];
    v_s_paused bigint[];
    v_dead_queues text[];
    v_big_dead text[];
BEGIN
    PERFORM lonnymq_check_range_v1('cap', p_cap, 1::bigint, 1000000000::bigint, false);
    v_now := lonnymq_now_ms_v1();
    v_heads := GREATEST(p_cap / 100, 100);
    v_max_channels := GREATEST(p_cap / 10, 1);
    -- Each queue's channel rows, and its walk: the first p_cap + 1 waiting messages of its
    -- first v_max_channels channels (all of them when the queue is within both bounds).
    SELECT pg_catalog.array_agg(q.queue ORDER BY q.queue), pg_catalog.array_agg(q.channels ORDER BY q.queue),
           pg_catalog.array_agg(q.paused_channels ORDER BY q.queue),
           pg_catalog.array_agg(q.released_total + coalesce(
               (SELECT pg_catalog.sum(rc.released) FROM lonnymq_release_count rc
                  JOIN lonnymq_channel c ON c.id = rc.channel_id WHERE c.queue = q.queue), 0::numeric) ORDER BY q.queue),
           pg_catalog.array_agg(w.n ORDER BY q.queue), pg_catalog.array_agg(w.ready ORDER BY q.queue),
           pg_catalog.array_agg(w.scheduled ORDER BY q.queue), pg_catalog.array_agg(w.paused ORDER BY q.queue),
           pg_catalog.array_agg(w.head ORDER BY q.queue),
           pg_catalog.array_agg(q.queue) FILTER (WHERE q.channels > v_max_channels OR w.n > p_cap)
      INTO v_queues, v_channels, v_paused_channels, v_released, v_walked, v_ready, v_scheduled, v_paused,
           v_head, v_big
      FROM (SELECT c.queue, pg_catalog.count(*) AS channels, pg_catalog.count(*) FILTER (WHERE c.paused) AS paused_channels,
                   pg_catalog.sum(c.released_total) AS released_total
              FROM lonnymq_channel c
             WHERE p_queues IS NULL OR c.queue = ANY (p_queues)
             GROUP BY c.queue) q
     CROSS JOIN LATERAL (
          SELECT pg_catalog.count(*) AS n,
                 pg_catalog.count(*) FILTER (WHERE NOT x.paused AND x.dequeue_at <= v_now) AS ready,
                 pg_catalog.count(*) FILTER (WHERE NOT x.paused AND x.dequeue_at > v_now) AS scheduled,
                 pg_catalog.count(*) FILTER (WHERE x.paused) AS paused,
                 pg_catalog.min(x.dequeue_at) FILTER (WHERE NOT x.paused) AS head
            FROM (SELECT c.paused, r.dequeue_at
                    FROM (SELECT c0.id, c0.paused FROM lonnymq_channel c0
                           WHERE c0.queue = q.queue LIMIT v_max_channels) c
                   CROSS JOIN LATERAL (SELECT m.dequeue_at FROM lonnymq_message m
                                        WHERE m.channel_id = c.id AND m.lease_until IS NULL
                                        -- In index order: a scan that stops at the limit (a
                                        -- bitmap scan would read the whole channel first).
                                        ORDER BY m.dequeue_at, m.id LIMIT p_cap + 1) r
                   LIMIT p_cap + 1) x
      ) w;
    IF v_big IS NOT NULL THEN
        -- A sample of about v_heads pages, of the table's size now (not the planner's last look).
        v_pct := LEAST(100::double precision,
                       100::double precision * v_heads::double precision
                       / GREATEST(pg_catalog.pg_relation_size('lonnymq_message'::regclass)::double precision
                                  / pg_catalog.current_setting('block_size')::double precision, 1::double precision));
        IF pg_catalog.cardinality(v_big) = 1 THEN
            -- One estimated queue (the usual case): a sampled row whose channel is not one of
            -- the other queues' or a paused one is in an unpaused channel of that queue, so
            -- only those few channels are hashed.
            SELECT ARRAY[v_big[1]],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.id IS NULL AND m.dequeue_at <= v_now)],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.id IS NULL AND m.dequeue_at > v_now)],
                   ARRAY[pg_catalog.count(*) FILTER (WHERE x.queue = v_big[1])]
              INTO v_s_queues, v_s_ready, v_s_scheduled, v_s_paused
              FROM lonnymq_message m TABLESAMPLE SYSTEM (v_pct)
              LEFT JOIN (SELECT c.id, c.queue FROM lonnymq_channel c
                          WHERE c.queue <> v_big[1] OR c.paused) x ON x.id = m.channel_id
             WHERE m.lease_until IS NULL;
        ELSE
            SELECT pg_catalog.array_agg(s.queue), pg_catalog.array_agg(s.ready), pg_catalog.array_agg(s.scheduled),
                   pg_catalog.array_agg(s.paused)
              INTO v_s_queues, v_s_ready, v_s_scheduled, v_s_paused
              FROM (SELECT c.queue,
                           pg_catalog.count(*) FILTER (WHERE NOT c.paused AND m.dequeue_at <= v_now) AS ready,
                           pg_catalog.count(*) FILTER (WHERE NOT c.paused AND m.dequeue_at > v_now) AS scheduled,
                           pg_catalog.count(*) FILTER (WHERE c.paused) AS paused
                      FROM lonnymq_message m TABLESAMPLE SYSTEM (v_pct)
                      JOIN lonnymq_channel c ON c.id = m.channel_id
                     WHERE m.lease_until IS NULL AND c.queue = ANY (v_big)
                     GROUP BY c.queue) s;
        END IF;
    END IF;
    -- Queues with dead letters (a skip scan of the (queue, died_at) index), and those with
    -- more than p_cap of them.
    WITH RECURSIVE dq AS (
        SELECT (SELECT pg_catalog.min(d.queue) FROM lonnymq_dead_message d
                 WHERE p_queues IS NULL OR d.queue = ANY (p_queues)) AS queue
        UNION ALL
        SELECT (SELECT pg_catalog.min(d.queue) FROM lonnymq_dead_message d
                 WHERE d.queue > dq.queue AND (p_queues IS NULL OR d.queue = ANY (p_queues)))
          FROM dq WHERE dq.queue IS NOT NULL
    )
    SELECT pg_catalog.array_agg(dq.queue),
           pg_catalog.array_agg(dq.queue) FILTER (
               WHERE (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq_dead_message d WHERE d.queue = dq.queue
                                                       LIMIT p_cap + 1) x) > p_cap)
      INTO v_dead_queues, v_big_dead
      FROM dq
     WHERE dq.queue IS NOT NULL;
    IF v_big_dead IS NOT NULL THEN
        v_dead_pct := LEAST(100::double precision,
                            100::double precision * v_heads::double precision
                            / GREATEST(pg_catalog.pg_relation_size('lonnymq_dead_message'::regclass)::double precision
                                       / pg_catalog.current_setting('block_size')::double precision, 1::double precision));
    END IF;
    RETURN QUERY
    WITH per_queue AS (
        SELECT u.queue, u.channels, u.paused_channels, u.released, u.walked, u.ready, u.scheduled, u.paused, u.head,
               u.queue = ANY (coalesce(v_big, '{}'::text[])) AS big
          FROM ROWS FROM (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_channels),
                          pg_catalog.unnest(v_paused_channels), pg_catalog.unnest(v_released),
                          pg_catalog.unnest(v_walked), pg_catalog.unnest(v_ready), pg_catalog.unnest(v_scheduled),
                          pg_catalog.unnest(v_paused), pg_catalog.unnest(v_head))
               AS u(queue, channels, paused_channels, released, walked, ready, scheduled, paused, head)
    ), sampled AS (
        SELECT u.queue, u.ready, u.scheduled, u.paused
          FROM ROWS FROM (pg_catalog.unnest(v_s_queues), pg_catalog.unnest(v_s_ready),
                          pg_catalog.unnest(v_s_scheduled), pg_catalog.unnest(v_s_paused))
               AS u(queue, ready, scheduled, paused)
    ), heads AS (
        -- An estimated queue's oldest waiting message: the first entries of the v_heads
        -- channels next in turn, and of the v_heads at their cap with the earliest turn.
        SELECT b.queue, pg_catalog.min(h.dequeue_at) AS head
          FROM pg_catalog.unnest(v_big) AS b(queue)
         CROSS JOIN LATERAL (
              (SELECT c.id FROM lonnymq_channel c
                WHERE c.queue = b.queue AND c.next_dequeue_at IS NOT NULL AND NOT c.paused
                  AND (c.max_concurrency IS NULL OR c.in_flight + least(c.head_slots, c.max_concurrency) <= c.max_concurrency)
                ORDER BY c.next_dequeue_at LIMIT v_heads)
              UNION ALL
              (SELECT c.id FROM lonnymq_channel c
                WHERE c.queue = b.queue AND NOT c.paused
                  AND c.in_flight + least(c.head_slots, c.max_concurrency) > c.max_concurrency
                ORDER BY c.next_dequeue_at NULLS LAST LIMIT v_heads)
          ) k
         CROSS JOIN LATERAL (SELECT m.dequeue_at FROM lonnymq_message m
                              WHERE m.channel_id = k.id AND m.lease_until IS NULL
                              ORDER BY m.dequeue_at, m.id LIMIT 1) h
         GROUP BY b.queue
    ), flying AS (
        SELECT c.queue, pg_catalog.count(*) AS n
          FROM lonnymq_message m JOIN lonnymq_channel c ON c.id = m.channel_id
         WHERE m.lease_until IS NOT NULL AND (p_queues IS NULL OR c.queue = ANY (p_queues))
         GROUP BY c.queue
    ), dead AS (
        SELECT u.queue, u.queue = ANY (coalesce(v_big_dead, '{}'::text[])) AS big,
               CASE WHEN u.queue = ANY (coalesce(v_big_dead, '{}'::text[]))
                    THEN (SELECT pg_catalog.count(*) FROM lonnymq_dead_message d TABLESAMPLE SYSTEM (v_dead_pct)
                           WHERE d.queue = u.queue)
                    ELSE (SELECT pg_catalog.count(*) FROM lonnymq_dead_message d WHERE d.queue = u.queue) END AS n
          FROM pg_catalog.unnest(v_dead_queues) AS u(queue)
    ), pruned AS (
        SELECT p.queue, p.released FROM lonnymq_queue_released p
         WHERE p_queues IS NULL OR p.queue = ANY (p_queues)
    ), queues AS (
        SELECT per_queue.queue FROM per_queue UNION SELECT dead.queue FROM dead
        UNION SELECT pruned.queue FROM pruned
    )
    SELECT NULL::bigint, q.queue, pg_catalog.clock_timestamp(),
           coalesce(pq.channels, 0), coalesce(pq.paused_channels, 0),
           CASE WHEN pq.big THEN GREATEST(pq.ready, pg_catalog.round(coalesce(s.ready, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.ready, 0) END,
           CASE WHEN pq.big THEN GREATEST(pq.scheduled, pg_catalog.round(coalesce(s.scheduled, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.scheduled, 0) END,
           coalesce(f.n, 0),
           CASE WHEN d.big THEN GREATEST(p_cap + 1, pg_catalog.round(d.n::double precision * 100::double precision / v_dead_pct)::bigint)
                ELSE coalesce(d.n, 0) END,
           CASE WHEN coalesce(h.head, pq.head) <= v_now THEN v_now - coalesce(h.head, pq.head) END,
           (coalesce(pq.released, 0::numeric) + coalesce(p.released, 0::bigint)::numeric)::bigint,
           CASE WHEN pq.big THEN GREATEST(pq.paused, pg_catalog.round(coalesce(s.paused, 0::bigint)::double precision * 100::double precision / v_pct)::bigint)
                ELSE coalesce(pq.paused, 0) END,
           coalesce(pq.big, false) OR coalesce(d.big, false)
      FROM queues q
      LEFT JOIN per_queue pq ON pq.queue = q.queue
      LEFT JOIN sampled s ON s.queue = q.queue
      LEFT JOIN heads h ON h.queue = q.queue
      LEFT JOIN flying f ON f.queue = q.queue
      LEFT JOIN dead d ON d.queue = q.queue
      LEFT JOIN pruned p ON p.queue = q.queue
     ORDER BY q.queue;
END
$$;

-- Ready, scheduled and in-flight counts of a few channels (one admin changelist page).
-- ready and scheduled are exact up to p_cap and stop counting there (each is one bounded
-- range of the ready index); in_flight walks the lease index, whose size is the number of
-- messages in flight in the whole database (bounded by the workers' capacity).
CREATE FUNCTION lonnymq_channel_counts_v1(p_ids bigint[], p_cap integer DEFAULT 10000)
RETURNS TABLE (channel_id bigint, ready bigint, scheduled bigint, in_flight bigint)
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    WITH now_ms AS (
        SELECT lonnymq_now_ms_v1() AS v
    ), flying AS (
        SELECT m.channel_id, pg_catalog.count(*) AS n FROM lonnymq_message m
         WHERE m.lease_until IS NOT NULL AND m.channel_id = ANY (p_ids)
         GROUP BY m.channel_id
    )
    SELECT p.id,
           (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq_message m
                                   WHERE m.channel_id = p.id AND m.lease_until IS NULL
                                     AND m.dequeue_at <= now_ms.v
                                   LIMIT p_cap) r),
           (SELECT pg_catalog.count(*) FROM (SELECT 1 FROM lonnymq_message m
                                   WHERE m.channel_id = p.id AND m.lease_until IS NULL
                                     AND m.dequeue_at > now_ms.v
                                   LIMIT p_cap) s),
           coalesce(f.n, 0)
      FROM pg_catalog.unnest(p_ids) AS p(id) CROSS JOIN now_ms
      LEFT JOIN flying f ON f.channel_id = p.id
$$;

-- Planner's row estimate of a table (pg_class.reltuples): -1 when never analyzed.
CREATE FUNCTION lonnymq_estimated_rows_v1(p_table regclass) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.reltuples::bigint FROM pg_catalog.pg_class c WHERE c.oid = p_table
$$;

-- Record one sample per queue now (lonnymq_queue_stats_v3's figures, exact up to p_cap and
-- estimated past it: paused apart) and drop samples older than p_keep_ms. Returns the rows
-- recorded, each with `estimated` (not stored: a sample holds the figures only).
CREATE FUNCTION lonnymq_record_samples_v3(p_keep_ms bigint DEFAULT 86400000, p_cap bigint DEFAULT 100000)
RETURNS TABLE (id bigint, queue text, at timestamptz, channels bigint, paused_channels bigint,
               ready bigint, scheduled bigint, in_flight bigint, dead bigint, oldest_ready_ms bigint,
               released_total bigint, paused bigint, estimated boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    DELETE FROM lonnymq_queue_sample s
     WHERE s.at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => p_keep_ms::double precision / 1000::double precision);
    RETURN QUERY
        WITH figures AS (
            SELECT * FROM lonnymq_queue_stats_v3(NULL::text[], p_cap)
        ), written AS (
            INSERT INTO lonnymq_queue_sample (queue, at, channels, paused_channels, ready, scheduled,
                                              in_flight, dead, oldest_ready_ms, released_total, paused)
            SELECT x.queue, x.at, x.channels, x.paused_channels, x.ready, x.scheduled,
                   x.in_flight, x.dead, x.oldest_ready_ms, x.released_total, x.paused
              FROM figures x
            RETURNING *
        )
        SELECT w.id, w.queue, w.at, w.channels, w.paused_channels, w.ready, w.scheduled, w.in_flight,
               w.dead, w.oldest_ready_ms, w.released_total, w.paused, x.estimated
          FROM written w JOIN figures x ON x.queue = w.queue
         ORDER BY w.queue;
END
$$;

-- One sample per queue if none was recorded in the last p_interval_ms, by one caller at a
-- time: every worker calls this on its own clock, the first to take the sampler's lock
-- records (lonnymq_record_samples_v3 with p_cap, pruning samples older than p_keep_ms) and
-- the others find the lock taken, or a sample too recent, and record nothing. Any recorder
-- counts (`lonnymq_stats --record` too), so samples are at least p_interval_ms apart.
-- Returns the rows recorded (0: not due, or another caller is recording).
-- The lock: the two-key form with the queue's namespace and key -210, which no channel's key
-- (channel id modulo 2^31-1, never negative) can take (docs/locking.md).
CREATE FUNCTION lonnymq_record_samples_due_v2(p_interval_ms bigint, p_keep_ms bigint, p_cap bigint)
RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_recorded integer;
BEGIN
    PERFORM lonnymq_check_range_v1('interval', p_interval_ms, 1000::bigint, 86400000::bigint, false);
    PERFORM lonnymq_check_range_v1('keep', p_keep_ms, 1::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('cap', p_cap, 1::bigint, 1000000000::bigint, false);
    IF NOT pg_catalog.pg_try_advisory_xact_lock(lonnymq_lock_ns_v1(), -210) THEN
        RETURN 0;
    END IF;
    -- Under the lock, and in a statement that began after the previous holder committed.
    IF EXISTS (SELECT 1 FROM lonnymq_queue_sample s
                WHERE s.at > pg_catalog.clock_timestamp()
                             - pg_catalog.make_interval(secs => p_interval_ms::double precision / 1000::double precision)) THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.count(*)::integer INTO v_recorded FROM lonnymq_record_samples_v3(p_keep_ms, p_cap);
    RETURN v_recorded;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Workers: who is consuming (django_lonnymq/workers.py)
-- ---------------------------------------------------------------------------------------

-- One row per worker process, written by the heartbeat the worker already runs (one upsert
-- per beat, never per message) and marked stopped on a graceful shutdown. A row whose
-- heartbeat is older than LONNYMQ_WORKER_LOST_AFTER is a lost worker; any worker's beat
-- deletes rows silent or stopped for longer than LONNYMQ_WORKER_PRUNE_AFTER. A message's
-- leased_by holds its worker's name.
CREATE TABLE lonnymq_worker (
    name          text        PRIMARY KEY,
    -- This run of the worker: a restarted process with the same name is a new instance.
    instance      uuid        NOT NULL,
    host          text        NOT NULL,
    pid           integer     NOT NULL,
    queues        text[]      NOT NULL,
    concurrency   integer     NOT NULL,
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    stopped_at    timestamptz NULL,
    -- As of the last heartbeat: messages leased (running or waiting for a thread), handled
    -- successfully, and failed (retried or dead).
    in_flight     integer     NOT NULL DEFAULT 0,
    processed     bigint      NOT NULL DEFAULT 0,
    failed        bigint      NOT NULL DEFAULT 0,
    CONSTRAINT lonnymq_worker_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_worker_name_not_blank CHECK (name ~ '\S'),
    CONSTRAINT lonnymq_worker_counts_nonnegative
        CHECK (in_flight >= 0 AND processed >= 0 AND failed >= 0 AND concurrency >= 1)
) WITH (fillfactor = 50);

-- A worker's heartbeat: record its figures under its name and return the name it holds.
-- The name is taken when it is free, or held by a worker that stopped or has been silent
-- longer than p_lost_after_ms; a name a live worker holds is made unique with '#2', '#3'...
-- (the worker then leases under the returned name). Also deletes rows silent or stopped
-- for longer than p_prune_after_ms. One statement's worth of work per beat.
CREATE FUNCTION lonnymq_worker_beat_v1(
    p_name           text,
    p_instance       uuid,
    p_host           text,
    p_pid            integer,
    p_queues         text[],
    p_concurrency    integer,
    p_started_at     timestamptz,
    p_in_flight      integer,
    p_processed      bigint,
    p_failed         bigint,
    p_lost_after_ms  bigint,
    p_prune_after_ms bigint
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now     timestamptz := pg_catalog.clock_timestamp();
    v_lost    timestamptz;
    v_name    text := p_name;
    v_suffix  integer := 1;
BEGIN
    IF p_name IS NULL OR pg_catalog.char_length(p_name) NOT BETWEEN 1 AND 200 OR p_name !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'must be 1 to 200 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_name));
    END IF;
    IF p_instance IS NULL OR p_host IS NULL OR p_pid IS NULL OR p_queues IS NULL OR p_started_at IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('worker', 'instance, host, pid, queues and started_at are required', NULL);
    END IF;
    PERFORM lonnymq_check_list_v1('queues', pg_catalog.array_ndims(p_queues));
    PERFORM lonnymq_check_range_v1('concurrency', p_concurrency::bigint, 1::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('in_flight', p_in_flight::bigint, 0::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('processed', p_processed, 0::bigint, 9223372036854775807::bigint, false);
    PERFORM lonnymq_check_range_v1('failed', p_failed, 0::bigint, 9223372036854775807::bigint, false);
    PERFORM lonnymq_check_range_v1('lost_after', p_lost_after_ms, 1::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('prune_after', p_prune_after_ms, 1::bigint, 31622400000::bigint, false);
    v_lost := v_now - pg_catalog.make_interval(secs => p_lost_after_ms::double precision / 1000::double precision);

    LOOP
        -- Our own row: the usual beat.
        UPDATE lonnymq_worker w
           SET heartbeat_at = v_now, in_flight = p_in_flight, processed = p_processed,
               failed = p_failed, queues = p_queues, concurrency = p_concurrency
         WHERE w.name = v_name AND w.instance = p_instance AND w.stopped_at IS NULL;
        EXIT WHEN FOUND;
        -- A free name, or one whose holder stopped or went silent: take it.
        INSERT INTO lonnymq_worker AS w (name, instance, host, pid, queues, concurrency, started_at,
                                         heartbeat_at, stopped_at, in_flight, processed, failed)
        VALUES (v_name, p_instance, p_host, p_pid, p_queues, p_concurrency, p_started_at,
                v_now, NULL, p_in_flight, p_processed, p_failed)
        ON CONFLICT (name) DO UPDATE
           SET instance = EXCLUDED.instance, host = EXCLUDED.host, pid = EXCLUDED.pid,
               queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency,
               started_at = EXCLUDED.started_at, heartbeat_at = EXCLUDED.heartbeat_at,
               stopped_at = NULL, in_flight = EXCLUDED.in_flight,
               processed = EXCLUDED.processed, failed = EXCLUDED.failed
         WHERE w.stopped_at IS NOT NULL OR w.heartbeat_at < v_lost;
        EXIT WHEN FOUND;
        -- A live worker holds it: the next name.
        v_suffix := v_suffix + 1;
        IF v_suffix > 1000 THEN
            PERFORM lonnymq_raise_invalid_v1('name', 'is held by 1000 live workers already',
                                             pg_catalog.quote_literal(p_name));
        END IF;
        v_name := pg_catalog.left(p_name, 200 - 1 - pg_catalog.length(v_suffix::text)) || '#' || v_suffix::text;
    END LOOP;

    DELETE FROM lonnymq_worker w
     WHERE coalesce(w.stopped_at, w.heartbeat_at)
           < v_now - pg_catalog.make_interval(secs => p_prune_after_ms::double precision / 1000::double precision)
       AND w.name <> v_name;
    RETURN v_name;
END
$$;

-- A graceful shutdown: the worker's row is marked stopped at once, with its last figures.
-- Returns false when the row is gone or another instance holds the name now.
CREATE FUNCTION lonnymq_worker_stop_v1(
    p_name      text,
    p_instance  uuid,
    p_in_flight integer,
    p_processed bigint,
    p_failed    bigint
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM lonnymq_check_range_v1('in_flight', p_in_flight::bigint, 0::bigint, 2147483647::bigint, false);
    PERFORM lonnymq_check_range_v1('processed', p_processed, 0::bigint, 9223372036854775807::bigint, false);
    PERFORM lonnymq_check_range_v1('failed', p_failed, 0::bigint, 9223372036854775807::bigint, false);
    UPDATE lonnymq_worker w
       SET stopped_at = v_now, heartbeat_at = v_now, in_flight = p_in_flight,
           processed = p_processed, failed = p_failed
     WHERE w.name = p_name AND w.instance = p_instance;
    RETURN FOUND;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Topics and consumer groups (django_lonnymq/topics.py)
-- ---------------------------------------------------------------------------------------

-- A consumer group: the queue that receives its own copy of every message published to the
-- topic (its own deliveries, retries and dead letters). Edited in the admin, or declared in
-- code with subscribe(topic, queue=...) and written when a worker starts.
CREATE TABLE lonnymq_subscription (
    id          bigserial   PRIMARY KEY,
    topic       text        NOT NULL,
    queue       text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_subscription_topic_queue_uniq UNIQUE (topic, queue),
    CONSTRAINT lonnymq_subscription_topic_length CHECK (char_length(topic) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_subscription_topic_not_blank CHECK (topic ~ '\S'),
    CONSTRAINT lonnymq_subscription_queue_length CHECK (char_length(queue) BETWEEN 1 AND 100),
    CONSTRAINT lonnymq_subscription_queue_not_blank CHECK (queue ~ '\S')
);

-- Events published to a topic that had no subscriber then: counted here, one row per topic
-- (nothing else is written for them). Only such publishes touch this row, so publishing to
-- a subscribed topic never waits on it.
CREATE TABLE lonnymq_unrouted (
    topic            text        PRIMARY KEY,
    events           bigint      NOT NULL DEFAULT 0,
    last_published_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lonnymq_unrouted_topic_length CHECK (char_length(topic) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_unrouted_events_nonnegative CHECK (events >= 0)
);

-- Topic names: 1 to 200 characters, not only blanks.
CREATE FUNCTION lonnymq_check_topic_v1(p_topic text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_topic IS NULL OR pg_catalog.char_length(p_topic) NOT BETWEEN 1 AND 200 OR p_topic !~ '\S' THEN
        PERFORM lonnymq_raise_invalid_v1('topic', 'must be 1 to 200 characters, not only blanks',
                                         pg_catalog.quote_nullable(p_topic));
    END IF;
END
$$;

-- Publish events to a topic: each event becomes one message in every queue subscribed to it,
-- in the caller's transaction, through lonnymq_enqueue_many_v4 queue by queue in queue-name
-- order (so concurrent publishers take their locks in one order). An event's key names its
-- channel in each queue (NULL: 'default'); p_on_duplicate is each event's dedup mode; p_costs
-- each event's cost in every queue (NULL array or element: 1; a cost past one queue's bucket
-- refuses the whole publish: lonnymq_check_costs_v1); p_slots each event's slots in every
-- queue (likewise; lonnymq_check_slots_v1). Returns one row per subscribed queue,
-- with the message ids in event order; no row when the topic has no subscriber, whose events
-- are counted in lonnymq_unrouted instead (their modes, costs and slots checked all the same).
CREATE FUNCTION lonnymq_publish_v4(
    p_topic                text,
    p_keys                 text[],
    p_payloads             jsonb[],
    p_run_at_ms            bigint[]  DEFAULT NULL,
    p_dedup_keys           text[]    DEFAULT NULL,
    p_on_duplicate         text[]    DEFAULT NULL,
    p_default_max_attempts integer   DEFAULT 5,
    p_priority_step_ms     bigint    DEFAULT 1000,
    p_tolerance_ms         bigint    DEFAULT 50,
    p_costs                integer[] DEFAULT NULL,
    p_slots                integer[] DEFAULT NULL
) RETURNS TABLE (queue text, ids bigint[])
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n        integer := coalesce(pg_catalog.cardinality(p_payloads), 0);
    v_channels text[];
    v_bad      record;
    v_queue    text;
    v_routed   boolean := false;
BEGIN
    PERFORM lonnymq_check_topic_v1(p_topic);
    IF (p_keys IS NOT NULL AND pg_catalog.cardinality(p_keys) <> v_n)
       OR (p_run_at_ms IS NOT NULL AND pg_catalog.cardinality(p_run_at_ms) <> v_n)
       OR (p_dedup_keys IS NOT NULL AND pg_catalog.cardinality(p_dedup_keys) <> v_n)
       OR (p_on_duplicate IS NOT NULL AND pg_catalog.cardinality(p_on_duplicate) <> v_n)
       OR (p_costs IS NOT NULL AND pg_catalog.cardinality(p_costs) <> v_n)
       OR (p_slots IS NOT NULL AND pg_catalog.cardinality(p_slots) <> v_n) THEN
        PERFORM lonnymq_raise_invalid_v1('events', 'arrays must all have the same length', v_n::text);
    END IF;
    PERFORM lonnymq_check_list_v1('keys', pg_catalog.array_ndims(p_keys));
    PERFORM lonnymq_check_list_v1('payloads', pg_catalog.array_ndims(p_payloads));
    IF v_n = 0 THEN
        RETURN;
    END IF;
    -- A key is a channel name: the first bad one is named as events[i].key (from 0).
    SELECT u.k, u.ord INTO v_bad
      FROM pg_catalog.unnest(p_keys) WITH ORDINALITY AS u(k, ord)
     WHERE u.k IS NOT NULL AND (pg_catalog.char_length(u.k) NOT BETWEEN 1 AND 200 OR u.k !~ '\S')
     ORDER BY u.ord
     LIMIT 1;
    IF FOUND THEN
        PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('events[%s].key', v_bad.ord - 1),
            'must be 1 to 200 characters, not only blanks', pg_catalog.quote_literal(v_bad.k));
    END IF;
    IF p_keys IS NULL THEN
        v_channels := pg_catalog.array_fill('default'::text, ARRAY[v_n]);
    ELSE
        SELECT pg_catalog.array_agg(coalesce(u.k, 'default'::text) ORDER BY u.ord) INTO v_channels
          FROM pg_catalog.unnest(p_keys) WITH ORDINALITY AS u(k, ord);
    END IF;

    FOR v_queue IN SELECT s.queue FROM lonnymq_subscription s WHERE s.topic = p_topic ORDER BY s.queue LOOP
        v_routed := true;
        queue := v_queue;
        ids := lonnymq_enqueue_many_v4(v_queue, v_channels, p_payloads, p_run_at_ms, NULL::bigint[],
                                       NULL::integer[], p_dedup_keys, p_on_duplicate, NULL::integer[],
                                       p_default_max_attempts, p_priority_step_ms, p_tolerance_ms, p_costs,
                                       p_slots);
        RETURN NEXT;
    END LOOP;
    IF NOT v_routed THEN
        -- Still checked, as a routed publish would be: a bad event is an error either way.
        PERFORM lonnymq_check_range_v1('max_attempts', p_default_max_attempts::bigint, 1::bigint, 1000::bigint, false);
        PERFORM lonnymq_check_list_v1('on_duplicate', pg_catalog.array_ndims(p_on_duplicate));
        SELECT u.mode, u.ord INTO v_bad
          FROM ROWS FROM (pg_catalog.unnest(p_on_duplicate), pg_catalog.unnest(p_dedup_keys)) WITH ORDINALITY AS u(mode, k, ord)
         WHERE u.mode IS NOT NULL AND (u.mode NOT IN ('skip', 'replace', 'update') OR (u.mode <> 'skip' AND u.k IS NULL))
         ORDER BY u.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].on_duplicate', v_bad.ord - 1),
                CASE WHEN v_bad.mode IN ('skip', 'replace', 'update') THEN 'needs a dedup_key'
                     ELSE 'must be skip, replace or update' END,
                pg_catalog.quote_literal(v_bad.mode));
        END IF;
        PERFORM lonnymq_check_list_v1('costs', pg_catalog.array_ndims(p_costs));
        SELECT u.cost, u.ord INTO v_bad
          FROM pg_catalog.unnest(p_costs) WITH ORDINALITY AS u(cost, ord)
         WHERE coalesce(u.cost, 1) NOT BETWEEN 1 AND 1000000
         ORDER BY u.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].cost', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', v_bad.cost::text);
        END IF;
        PERFORM lonnymq_check_list_v1('slots', pg_catalog.array_ndims(p_slots));
        SELECT u.slots, u.ord INTO v_bad
          FROM pg_catalog.unnest(p_slots) WITH ORDINALITY AS u(slots, ord)
         WHERE coalesce(u.slots, 1) NOT BETWEEN 1 AND 1000000
         ORDER BY u.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM lonnymq_raise_invalid_v1(pg_catalog.format('items[%s].slots', v_bad.ord - 1),
                'must be an integer from 1 to 1000000', v_bad.slots::text);
        END IF;
        INSERT INTO lonnymq_unrouted AS r (topic, events, last_published_at)
        VALUES (p_topic, v_n::bigint, pg_catalog.now())
        ON CONFLICT (topic) DO UPDATE
           SET events = r.events + EXCLUDED.events, last_published_at = EXCLUDED.last_published_at;
    END IF;
END
$$;

-- Write subscriptions (the code-declared ones, at worker start): missing pairs are created,
-- existing ones left alone. Returns how many were created.
CREATE FUNCTION lonnymq_subscribe_v1(p_topics text[], p_queues text[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad     record;
    v_created integer;
BEGIN
    IF coalesce(pg_catalog.cardinality(p_topics), 0) <> coalesce(pg_catalog.cardinality(p_queues), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('subscriptions', 'topics and queues must have the same length', NULL);
    END IF;
    PERFORM lonnymq_check_list_v1('topics', pg_catalog.array_ndims(p_topics));
    PERFORM lonnymq_check_list_v1('queues', pg_catalog.array_ndims(p_queues));
    FOR v_bad IN SELECT u.t, u.q FROM ROWS FROM (pg_catalog.unnest(p_topics), pg_catalog.unnest(p_queues)) AS u(t, q) LOOP
        PERFORM lonnymq_check_topic_v1(v_bad.t);
        PERFORM lonnymq_check_names_v1(v_bad.q, 'default'::text);
    END LOOP;
    INSERT INTO lonnymq_subscription (topic, queue)
    SELECT DISTINCT u.t, u.q FROM ROWS FROM (pg_catalog.unnest(p_topics), pg_catalog.unnest(p_queues)) AS u(t, q)
     ORDER BY 1, 2
    ON CONFLICT (topic, queue) DO NOTHING;
    GET DIAGNOSTICS v_created = ROW_COUNT;
    RETURN v_created;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Workflows: steps of a DAG released by the ack of their last parent (django_lonnymq/workflows.py)
-- ---------------------------------------------------------------------------------------

-- A workflow: its steps, how many have not succeeded yet, how many are dead now. running
-- -> succeeded (every step succeeded), running -> failed (a step is dead; back to running
-- when the dead steps are requeued), running or failed -> cancelled.
CREATE TABLE lonnymq_workflow (
    id                     bigserial   PRIMARY KEY,
    name                   text        NOT NULL,
    -- The steps' default channel (the tenant, for the admin's list).
    channel                text        NULL,
    state                  text        NOT NULL DEFAULT 'running',
    steps                  integer     NOT NULL,
    remaining              integer     NOT NULL,
    dead                   integer     NOT NULL DEFAULT 0,
    -- The message enqueued once when the workflow first fails (flow.on_failure).
    on_failure_queue       text        NULL,
    on_failure_channel     text        NULL,
    on_failure_payload     jsonb       NULL,
    on_failure_max_attempts integer    NULL,
    on_failure_message_id  bigint      NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    finished_at            timestamptz NULL,
    CONSTRAINT lonnymq_workflow_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_workflow_state_known CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled')),
    -- At most 50,000 steps (django_lonnymq.bounds.MAX_WORKFLOW_STEPS).
    CONSTRAINT lonnymq_workflow_steps_range CHECK (steps BETWEEN 1 AND 50000),
    CONSTRAINT lonnymq_workflow_remaining_range CHECK (remaining BETWEEN 0 AND steps),
    CONSTRAINT lonnymq_workflow_dead_range CHECK (dead BETWEEN 0 AND steps),
    CONSTRAINT lonnymq_workflow_succeeded_all_done CHECK (state <> 'succeeded' OR remaining = 0),
    CONSTRAINT lonnymq_workflow_finished_when_not_running CHECK ((finished_at IS NULL) = (state = 'running')),
    CONSTRAINT lonnymq_workflow_on_failure_complete
        CHECK ((on_failure_queue IS NULL) = (on_failure_payload IS NULL)
               AND (on_failure_queue IS NULL) = (on_failure_channel IS NULL)
               AND (on_failure_queue IS NULL) = (on_failure_max_attempts IS NULL))
);
CREATE INDEX lonnymq_workflow_state_idx ON lonnymq_workflow (state, id);
CREATE INDEX lonnymq_workflow_finished_idx ON lonnymq_workflow (finished_at) WHERE finished_at IS NOT NULL;

-- A step. Its id is the id of its message (both from lonnymq_message_id_seq), allocated in
-- the order of a topological sort, so every parent's id is smaller than its children's. A
-- waiting step keeps its payload here and is not in the message table; its release inserts
-- its message (dedup key 'lonnymq.step:<workflow id>', which tells the worker it is a step)
-- and its ack forgets the payload. pending counts the parents that have not succeeded. Pages
-- are half filled: a step is updated twice (released, then done), on its own page (HOT). No
-- foreign key to its workflow: the trigger lonnymq_workflow_deleted deletes a workflow's steps.
CREATE TABLE lonnymq_workflow_step (
    id            bigint      PRIMARY KEY,
    workflow_id   bigint      NOT NULL,
    name          text        NOT NULL,
    queue         text        NOT NULL,
    channel       text        NOT NULL,
    payload       jsonb       NULL,
    delay_ms      bigint      NOT NULL DEFAULT 0,
    max_attempts  integer     NOT NULL,
    pending       integer     NOT NULL,
    state         text        NOT NULL,
    output        jsonb       NULL,
    -- Times this step was put into the message table by a start or a release (exactly 1 once
    -- released; a requeue of its dead message is not a release).
    releases      integer     NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    released_at   timestamptz NULL,
    finished_at   timestamptz NULL,
    -- The DAG's edges, kept on both ends: the ids of the step's parents (read for its inputs)
    -- and of its children (read by its ack), each in increasing order. A start writes one row
    -- per step and nothing else (an edge table's rows and their foreign-key checks were most
    -- of a fan-out's start).
    parents       bigint[]    NOT NULL DEFAULT '{}',
    children      bigint[]    NOT NULL DEFAULT '{}',
    -- The output's size as the CHECK below measures it (pg_column_size before compression),
    -- written by the ack (0 for no output; NULL for a step acked before 0042): a child's
    -- inputs are bounded by the sum over its parents, read without decompressing them.
    output_bytes  integer     NULL,
    CONSTRAINT lonnymq_workflow_step_name_unique UNIQUE (workflow_id, name),
    CONSTRAINT lonnymq_workflow_step_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_workflow_step_state_known
        CHECK (state IN ('waiting', 'queued', 'succeeded', 'dead', 'cancelled')),
    CONSTRAINT lonnymq_workflow_step_pending_nonnegative CHECK (pending >= 0),
    CONSTRAINT lonnymq_workflow_step_waiting_has_payload CHECK (state <> 'waiting' OR payload IS NOT NULL),
    CONSTRAINT lonnymq_workflow_step_released_once CHECK (releases BETWEEN 0 AND 1),
    CONSTRAINT lonnymq_workflow_step_released_when_ready CHECK (releases = 0 OR pending = 0),
    CONSTRAINT lonnymq_workflow_step_delay_range CHECK (delay_ms BETWEEN 0 AND 3155760000000),
    CONSTRAINT lonnymq_workflow_step_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT lonnymq_workflow_step_output_size CHECK (pg_column_size(output) <= 8388608),
    -- Every edge goes from a smaller id to a larger: no cycle can be stored.
    CONSTRAINT lonnymq_workflow_step_parents_before CHECK (id > ALL (parents)),
    CONSTRAINT lonnymq_workflow_step_children_after CHECK (id < ALL (children))
) WITH (fillfactor = 50);

-- A workflow's steps go with it (a prune, the admin, any DELETE or TRUNCATE), in the statement
-- that deletes it: what a foreign key's ON DELETE CASCADE did before 0037, without the key's check
-- on every step a start inserts (about 4 ms of a 1,000-step start). Only
-- lonnymq_workflow_start_v1 writes steps, for the workflow it has just inserted;
-- lonnymq_workflow_check_v1 reports a step whose workflow is missing. The steps of a
-- workflow are found through lonnymq_workflow_step_name_unique (workflow_id, name).
CREATE FUNCTION lonnymq_workflow_deleted_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        -- A DELETE: a TRUNCATE here fails when the statement that fired it truncates the steps too.
        DELETE FROM lonnymq_workflow_step;
    ELSE
        DELETE FROM lonnymq_workflow_step s USING gone g WHERE s.workflow_id = g.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER lonnymq_workflow_deleted AFTER DELETE ON lonnymq_workflow
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_workflow_deleted_v1();
CREATE TRIGGER lonnymq_workflow_truncated AFTER TRUNCATE ON lonnymq_workflow
    FOR EACH STATEMENT EXECUTE FUNCTION lonnymq_workflow_deleted_v1();

-- The DAG's edges, one row per edge, read from the steps' parents (for reading and for the
-- Django model WorkflowEdgeRecord; nothing writes it).
CREATE VIEW lonnymq_workflow_edge AS
SELECT e.parent_id, s.id AS child_id
  FROM lonnymq_workflow_step s CROSS JOIN LATERAL pg_catalog.unnest(s.parents) AS e(parent_id);

-- Put steps (locked by the caller, ready: pending = 0) into the message table, as an
-- enqueue would: channels created in name order, their shared advisory locks (per channel or
-- per stripe, lonnymq_lock_channels_v1), one wake-up mark per channel (which NOTIFYs the
-- queue's workers at commit).
CREATE FUNCTION lonnymq_workflow_release_v1(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now        bigint := lonnymq_now_ms_v1();
    v_group      record;
    v_channel_id bigint;
    v_channel_ids bigint[];
    v_n          integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    -- The channels (created in name order), then their shared locks in one call: at most
    -- 1,024, however many channels the roots of a workflow name.
    SELECT pg_catalog.array_agg(x.id) INTO v_channel_ids
      FROM (SELECT lonnymq_channel_id_v1(g.queue, g.channel) AS id
              FROM (SELECT DISTINCT s.queue, s.channel FROM lonnymq_workflow_step s
                     WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0) g
             ORDER BY g.queue, g.channel) x;
    IF v_channel_ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM lonnymq_lock_channels_v1(v_channel_ids);
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_channel_id := lonnymq_channel_id_v1(v_group.queue, v_group.channel);
        PERFORM lonnymq_hold_channels_v1(ARRAY[v_channel_id]);
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT s.id, v_channel_id, s.payload, v_now + s.delay_ms, 0, s.max_attempts,
               'lonnymq.step:' OPERATOR(pg_catalog.||) s.workflow_id::text
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0
           AND s.queue = v_group.queue AND s.channel = v_group.channel
         ORDER BY s.id;
        PERFORM lonnymq_mark_v1(v_group.queue, v_channel_id, v_now + v_group.delay_ms, p_tolerance_ms);
    END LOOP;
    UPDATE lonnymq_workflow_step s
       SET state = 'queued', payload = NULL, releases = s.releases + 1, released_at = pg_catalog.now()
     WHERE s.id = ANY (p_ids) AND s.state = 'waiting' AND s.pending = 0;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- Start a workflow in the caller's transaction: the workflow row, its steps (given in a
-- topological order: every edge goes from a lower to a higher index) with their edges as
-- arrays of ids (each step's parents and children), and the messages of the steps without
-- parents. One row per step: no edge rows, no foreign-key checks. Returns the workflow id.
CREATE FUNCTION lonnymq_workflow_start_v1(
    p_name                     text,
    p_channel                  text,
    p_names                    text[],
    p_queues                   text[],
    p_channels                 text[],
    p_payloads                 jsonb[],
    p_delays_ms                bigint[],
    p_max_attempts             integer[],
    p_edge_parents             integer[],
    p_edge_children            integer[],
    p_on_failure_queue         text,
    p_on_failure_channel       text,
    p_on_failure_payload       jsonb,
    p_on_failure_max_attempts  integer,
    p_tolerance_ms             bigint
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n    integer := coalesce(pg_catalog.cardinality(p_names), 0);
    v_id   bigint;
    v_ids  bigint[];
    v_bad  record;
    v_roots bigint[];
BEGIN
    PERFORM lonnymq_check_range_v1('steps', v_n::bigint, 1::bigint, 50000::bigint, false);
    IF pg_catalog.cardinality(p_queues) IS DISTINCT FROM v_n OR pg_catalog.cardinality(p_channels) IS DISTINCT FROM v_n
       OR pg_catalog.cardinality(p_payloads) IS DISTINCT FROM v_n OR pg_catalog.cardinality(p_delays_ms) IS DISTINCT FROM v_n
       OR pg_catalog.cardinality(p_max_attempts) IS DISTINCT FROM v_n THEN
        PERFORM lonnymq_raise_invalid_v1('steps', 'must give every step a queue, channel, payload, delay and max_attempts', v_n::text);
    END IF;
    IF coalesce(pg_catalog.cardinality(p_edge_parents), 0) <> coalesce(pg_catalog.cardinality(p_edge_children), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('after', 'must pair every parent with a child', NULL);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    FOR v_bad IN
        SELECT u.p, u.c FROM ROWS FROM (pg_catalog.unnest(p_edge_parents), pg_catalog.unnest(p_edge_children)) AS u(p, c)
         WHERE u.p IS NULL OR u.c IS NULL OR u.p < 1 OR u.c > v_n OR u.p >= u.c LIMIT 1
    LOOP
        PERFORM lonnymq_raise_invalid_v1('after', 'must name an earlier step of the same workflow (no cycle)',
                                         pg_catalog.format('step %s after step %s', v_bad.c, v_bad.p));
    END LOOP;
    -- Each queue and channel once, in the order of their first step (the first bad one named).
    FOR v_bad IN
        SELECT u.q, u.ch
          FROM ROWS FROM (pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels)) WITH ORDINALITY AS u(q, ch, i)
         GROUP BY u.q, u.ch ORDER BY pg_catalog.min(u.i)
    LOOP
        PERFORM lonnymq_check_names_v1(v_bad.q, v_bad.ch);
    END LOOP;
    IF p_on_failure_queue IS NOT NULL THEN
        PERFORM lonnymq_check_names_v1(p_on_failure_queue, p_on_failure_channel);
    END IF;

    INSERT INTO lonnymq_workflow (name, channel, steps, remaining, on_failure_queue, on_failure_channel,
                                  on_failure_payload, on_failure_max_attempts)
    VALUES (p_name, p_channel, v_n, v_n, p_on_failure_queue, p_on_failure_channel, p_on_failure_payload,
            p_on_failure_max_attempts)
    RETURNING id INTO v_id;
    -- Ids in increasing order of the step index: every edge goes from a smaller id to a larger.
    SELECT pg_catalog.array_agg(x.id ORDER BY x.id) INTO v_ids
      FROM (SELECT pg_catalog.nextval('lonnymq_message_id_seq') AS id FROM pg_catalog.generate_series(1, v_n)) x;
    WITH edges AS MATERIALIZED (
        SELECT DISTINCT e.p, e.c
          FROM ROWS FROM (pg_catalog.unnest(p_edge_parents), pg_catalog.unnest(p_edge_children)) AS e(p, c)
    )
    INSERT INTO lonnymq_workflow_step (id, workflow_id, name, queue, channel, payload, delay_ms, max_attempts,
                                       pending, state, parents, children)
    SELECT v_ids[u.i], v_id, u.name, u.queue, u.channel, u.payload, coalesce(u.delay_ms, 0), u.max_attempts,
           coalesce(pg_catalog.cardinality(p.ids), 0), 'waiting', coalesce(p.ids, ARRAY[]::bigint[]),
           coalesce(c.ids, ARRAY[]::bigint[])
      FROM ROWS FROM (pg_catalog.unnest(p_names), pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_payloads), pg_catalog.unnest(p_delays_ms), pg_catalog.unnest(p_max_attempts))
           WITH ORDINALITY AS u(name, queue, channel, payload, delay_ms, max_attempts, i)
      LEFT JOIN (SELECT d.c, pg_catalog.array_agg(v_ids[d.p] ORDER BY d.p) AS ids FROM edges d GROUP BY d.c) p
             ON p.c = u.i
      LEFT JOIN (SELECT d.p, pg_catalog.array_agg(v_ids[d.c] ORDER BY d.c) AS ids FROM edges d GROUP BY d.p) c
             ON c.p = u.i
     ORDER BY u.i;
    SELECT pg_catalog.array_agg(s.id ORDER BY s.id) INTO v_roots
      FROM lonnymq_workflow_step s WHERE s.workflow_id = v_id AND s.pending = 0;
    PERFORM lonnymq_workflow_release_v1(v_roots, p_tolerance_ms);
    RETURN v_id;
END
$$;

-- The three workflow functions a worker calls for every batch (this release, the step ack and
-- the inputs) plan without sequential scans: their statements reach steps by id, and a
-- generic plan made while the step table looked small (just emptied, vacuumed, autovacuum
-- not yet run) scanned all of it for each batch and kept doing so as it grew. Without JIT:
-- a plan that cannot avoid what a planner setting disables costs past jit_above_cost, and
-- compiling it took about 90 ms of every call.
--
-- Release steps (locked by the caller, ready: every parent succeeded) into the message table,
-- as an enqueue would: channels created in name order, each channel's shared advisory lock,
-- then one statement that marks the steps queued (their pending count 0) and inserts their
-- messages from the payloads they hold, then one wake-up mark per channel (which NOTIFYs the
-- queue's workers at commit). One update per step: the caller does not lower a released
-- step's count first. A step keeps its payload until it succeeds (its ack forgets it), so
-- the update returns it without reading each row a second time. Returns how many were
-- released.
CREATE FUNCTION lonnymq_workflow_release_v2(p_ids bigint[], p_tolerance_ms bigint) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_now      bigint := lonnymq_now_ms_v1();
    v_group    record;
    v_queues   text[] := ARRAY[]::text[];
    v_channels text[] := ARRAY[]::text[];
    v_ids      bigint[] := ARRAY[]::bigint[];
    v_delays   bigint[] := ARRAY[]::bigint[];
    v_n        integer := 0;
BEGIN
    IF p_ids IS NULL OR pg_catalog.cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    FOR v_group IN
        SELECT s.queue, s.channel, pg_catalog.min(s.delay_ms) AS delay_ms
          FROM lonnymq_workflow_step s
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting'
         GROUP BY s.queue, s.channel ORDER BY s.queue, s.channel
    LOOP
        v_queues := v_queues OPERATOR(pg_catalog.||) v_group.queue;
        v_channels := v_channels OPERATOR(pg_catalog.||) v_group.channel;
        v_ids := v_ids OPERATOR(pg_catalog.||) lonnymq_channel_id_v1(v_group.queue, v_group.channel);
        v_delays := v_delays OPERATOR(pg_catalog.||) v_group.delay_ms;
    END LOOP;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM lonnymq_lock_channels_v1(v_ids);
    PERFORM lonnymq_hold_channels_v1(v_ids);
    WITH released AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'queued', pending = 0, releases = s.releases + 1, released_at = pg_catalog.now()
         WHERE s.id = ANY (p_ids) AND s.state = 'waiting'
        RETURNING s.id, s.queue, s.channel, s.payload, s.delay_ms, s.max_attempts, s.workflow_id
    ), inserted AS (
        INSERT INTO lonnymq_message (id, channel_id, payload, dequeue_at, priority, max_attempts, dedup_key)
        SELECT r.id, c.id, r.payload, v_now + r.delay_ms, 0, r.max_attempts,
               'lonnymq.step:' OPERATOR(pg_catalog.||) r.workflow_id::text
          FROM released r
          JOIN ROWS FROM (pg_catalog.unnest(v_queues), pg_catalog.unnest(v_channels), pg_catalog.unnest(v_ids))
               AS c(queue, channel, id) ON c.queue = r.queue AND c.channel = r.channel
         ORDER BY r.id
        RETURNING 1
    )
    SELECT pg_catalog.count(*)::integer INTO v_n FROM inserted;
    FOR i IN 1 .. pg_catalog.cardinality(v_ids) LOOP
        PERFORM lonnymq_mark_v1(v_queues[i], v_ids[i], v_now + v_delays[i], p_tolerance_ms);
    END LOOP;
    RETURN v_n;
END
$$;

-- The bytes a step's inputs take: the sum of its parents' outputs as stored (output_bytes;
-- for an output acked before 0042, its length as JSON text). A step's inputs may take at most
-- 64 MiB (67,108,864 bytes, bounds.MAX_STEP_INPUTS): with the keys, whatever the number of
-- parents, far below the 256 MB of the largest jsonb value, and their text far below the
-- 1 GB of the largest value a row can send.
CREATE FUNCTION lonnymq_workflow_inputs_bytes_v1(p_parents bigint[]) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT coalesce(pg_catalog.sum(coalesce(p.output_bytes::bigint,
                                            pg_catalog.octet_length(p.output::text)::bigint)), 0)::bigint
      FROM lonnymq_workflow_step p WHERE p.id = ANY (p_parents)
$$;

-- The error a step whose inputs are past the bound is dead-lettered with.
CREATE FUNCTION lonnymq_inputs_too_large_v1(p_bytes bigint) RETURNS text
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT pg_catalog.format('inputs_too_large: the outputs of its parents take %s bytes as stored, more than '
                             'the 67108864 (64 MiB) a step''s inputs may take', p_bytes)
$$;

-- Ack steps (the worker's ack for messages whose dedup key says they are steps): the ack of
-- lonnymq_ack_v1, and in the same transaction each step acked now succeeds with its output,
-- its children count it, and every child whose parents have all succeeded is released (unless
-- its workflow was cancelled). A released child whose parents' outputs add up to more than 64
-- MiB as stored (the sum of their output_bytes; only a child of more than 8 parents can, each
-- output being at most 8 MiB) cannot be given its inputs: it is dead-lettered at once as
-- 'discarded' with an error saying 'inputs_too_large', which fails its workflow (and enqueues
-- on_failure) as any dead step does. A step whose lease is stale acks nothing, so a step run
-- twice counts once. Rows are locked in one order: messages (the ack), then steps (the ones
-- acked now, which no other ack can hold: each one's message was deleted by this ack; then
-- their waiting children by id), then workflows by id. Every statement reaches its rows
-- through an index (the ids given, the children's ids the acked steps' rows return), whatever
-- the size of the tables; a child is updated once, by the ack that lowers its count or
-- releases it, and a child shared by acks from other workers (a fan-in) is locked only after
-- this ack's own steps are written. The children are locked and counted in one statement: a
-- child another ack updated while this one waited for its lock is read as that ack left it
-- (READ COMMITTED's recheck of a locked row). No nested loops: every join here is between id
-- arrays and the rows they name, whose sizes a generic plan cannot know.
-- Returns the ids acked.
CREATE FUNCTION lonnymq_workflow_ack_v2(p_ids bigint[], p_tokens uuid[], p_outputs jsonb[], p_tolerance_ms bigint)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_nestloop = off
SET jit = off
AS $$
DECLARE
    v_acked   bigint[];
    v_flows   bigint[];
    v_nflows  integer;
    v_kids    bigint[];
    v_ready   bigint[];
    v_lower   bigint[];
    v_lower_n integer[];
    v_cancelled bigint[];
    v_big     bigint[];
    v_big_bytes bigint[];
BEGIN
    IF coalesce(pg_catalog.cardinality(p_outputs), 0) <> coalesce(pg_catalog.cardinality(p_ids), 0) THEN
        PERFORM lonnymq_raise_invalid_v1('outputs', 'must have one output per id', pg_catalog.cardinality(p_outputs)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    v_acked := lonnymq_ack_v1(p_ids, p_tokens);
    IF pg_catalog.cardinality(v_acked) = 0 THEN
        RETURN v_acked;
    END IF;
    -- The steps done now (their payload forgotten), their workflows, and their children (a
    -- child once per parent done).
    WITH done AS (
        UPDATE lonnymq_workflow_step s
           SET state = 'succeeded', output = p_outputs[pg_catalog.array_position(p_ids, s.id)], payload = NULL,
               output_bytes = coalesce(pg_catalog.pg_column_size(p_outputs[pg_catalog.array_position(p_ids, s.id)]), 0),
               finished_at = pg_catalog.now()
         WHERE s.id = ANY (v_acked) AND s.state = 'queued'
        RETURNING s.workflow_id, s.children
    )
    SELECT pg_catalog.array_agg(d.workflow_id), pg_catalog.count(DISTINCT d.workflow_id)::integer,
           (SELECT pg_catalog.array_agg(k.id ORDER BY k.id)
              FROM done x CROSS JOIN LATERAL pg_catalog.unnest(x.children) AS k(id))
      INTO v_flows, v_nflows, v_kids FROM done d;
    IF v_flows IS NULL THEN
        RETURN v_acked;
    END IF;
    IF v_kids IS NOT NULL THEN
        -- The cancelled workflows among these (a child is in its parent's workflow): their
        -- children are counted, never released. A cancel that commits after this read has
        -- marked its waiting steps cancelled, which the locking read below rechecks.
        SELECT pg_catalog.array_agg(w.id) INTO v_cancelled
          FROM lonnymq_workflow w WHERE w.id = ANY (v_flows) AND w.state = 'cancelled';
        -- The waiting children, locked in id order: those whose last parents are done now
        -- (released in one update each) and the others (their count lowered). Reached by
        -- their ids ("= ANY") and matched to their counts by a hash or merge join: a generic
        -- plan made while the tables looked small joined them in a nested loop, which read
        -- the children once per child (a 1,000-child release took 20 to 60 ms).
        SELECT pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE x.ready),
               pg_catalog.array_agg(x.id ORDER BY x.id) FILTER (WHERE NOT x.ready),
               pg_catalog.array_agg(x.n ORDER BY x.id) FILTER (WHERE NOT x.ready)
          INTO v_ready, v_lower, v_lower_n
          FROM (SELECT s.id, c.n,
                       s.pending = c.n AND (v_cancelled IS NULL OR s.workflow_id <> ALL (v_cancelled)) AS ready
                  FROM lonnymq_workflow_step s
                  JOIN (SELECT k.id, pg_catalog.count(*)::integer AS n
                          FROM pg_catalog.unnest(v_kids) AS k(id) GROUP BY k.id) c ON c.id = s.id
                 WHERE s.id = ANY (v_kids) AND s.state = 'waiting'
                 ORDER BY s.id FOR UPDATE OF s) x;
        IF v_lower IS NOT NULL THEN
            UPDATE lonnymq_workflow_step s SET pending = s.pending - u.n
              FROM ROWS FROM (pg_catalog.unnest(v_lower), pg_catalog.unnest(v_lower_n)) AS u(id, n)
             WHERE s.id = ANY (v_lower) AND s.id = u.id;
        END IF;
        IF v_ready IS NOT NULL THEN
            PERFORM lonnymq_workflow_release_v2(v_ready, p_tolerance_ms);
            -- The released children whose inputs are past the bound (a fan-in of more than 8).
            SELECT pg_catalog.array_agg(x.id ORDER BY x.id), pg_catalog.array_agg(x.bytes ORDER BY x.id)
              INTO v_big, v_big_bytes
              FROM (SELECT s.id, lonnymq_workflow_inputs_bytes_v1(s.parents) AS bytes
                      FROM lonnymq_workflow_step s
                     WHERE s.id = ANY (v_ready) AND pg_catalog.cardinality(s.parents) > 8) x
             WHERE x.bytes > 67108864;
        END IF;
    END IF;
    IF v_nflows > 1 THEN
        PERFORM 1 FROM lonnymq_workflow w WHERE w.id = ANY (v_flows) ORDER BY w.id FOR NO KEY UPDATE;
    END IF;
    UPDATE lonnymq_workflow w
       SET remaining = w.remaining - d.n,
           state = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN 'succeeded' ELSE w.state END,
           finished_at = CASE WHEN w.state = 'running' AND w.remaining = d.n THEN pg_catalog.now() ELSE w.finished_at END
      FROM (SELECT f.workflow_id, pg_catalog.count(*)::integer AS n
              FROM pg_catalog.unnest(v_flows) AS f(workflow_id) GROUP BY f.workflow_id) d
     WHERE w.id = ANY (v_flows) AND w.id = d.workflow_id;
    -- Last: the workflows are locked (in id order, above) before a dead step's trigger updates
    -- its own.
    IF v_big IS NOT NULL THEN
        FOR i IN 1 .. pg_catalog.cardinality(v_big) LOOP
            PERFORM lonnymq_bury_v1(ARRAY[v_big[i]], 'discarded', lonnymq_inputs_too_large_v1(v_big_bytes[i]));
        END LOOP;
    END IF;
    RETURN v_acked;
END
$$;

-- What a worker gives a dequeued step's handler: its name, its parents' outputs by name, and
-- the bytes they take (lonnymq_workflow_inputs_bytes_v1). Inputs past the bound are never
-- built (their outputs are NULL): the worker dead-letters the step as the ack that released
-- it did (a step requeued from the dead letters comes back this way). VOLATILE, so that
-- called after a dequeue in the same statement it reads with a snapshot of its own, taken
-- after the dequeue's: it sees the ack that released the step (and wrote its last parent's
-- output) even when that ack committed while the statement ran.
CREATE FUNCTION lonnymq_workflow_inputs_v2(p_ids bigint[])
RETURNS TABLE (id bigint, name text, outputs jsonb, inputs_bytes bigint)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    -- A batch without steps (NULL): nothing to read (plpgsql: its plan is kept per session).
    IF p_ids IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT x.id, x.name,
           CASE WHEN x.bytes <= 67108864 THEN
               coalesce((SELECT pg_catalog.jsonb_object_agg(p.name, coalesce(p.output, 'null'::jsonb))
                           FROM lonnymq_workflow_step p WHERE p.id = ANY (x.parents)), '{}'::jsonb)
           END,
           x.bytes
      FROM (SELECT s.id, s.name, s.parents, lonnymq_workflow_inputs_bytes_v1(s.parents) AS bytes
              FROM lonnymq_workflow_step s WHERE s.id = ANY (p_ids)) x;
END
$$;

-- A step's message went to the dead-letter table (attempts spent, discarded, timed out,
-- cancelled, lease expired): the step is dead and its workflow fails (its descendants wait
-- for good); the first failure enqueues the workflow's on_failure message. Under a cancelled
-- workflow the step is cancelled instead. The trigger fires only for step messages.
CREATE FUNCTION lonnymq_workflow_step_dead_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_workflow_id bigint;
    v_w record;
BEGIN
    SELECT s.workflow_id INTO v_workflow_id FROM lonnymq_workflow_step s
     WHERE s.id = NEW.id AND s.state = 'queued' FOR UPDATE;
    IF v_workflow_id IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT w.* INTO v_w FROM lonnymq_workflow w WHERE w.id = v_workflow_id FOR NO KEY UPDATE;
    IF v_w.state = 'cancelled' THEN
        UPDATE lonnymq_workflow_step s SET state = 'cancelled', finished_at = pg_catalog.now() WHERE s.id = NEW.id;
        RETURN NULL;
    END IF;
    UPDATE lonnymq_workflow_step s SET state = 'dead', finished_at = pg_catalog.now() WHERE s.id = NEW.id;
    UPDATE lonnymq_workflow w
       SET dead = w.dead + 1, state = 'failed', finished_at = coalesce(w.finished_at, pg_catalog.now())
     WHERE w.id = v_workflow_id;
    IF v_w.on_failure_queue IS NOT NULL AND v_w.on_failure_message_id IS NULL THEN
        UPDATE lonnymq_workflow w
           SET on_failure_message_id = lonnymq_enqueue_v3(
                   v_w.on_failure_queue, v_w.on_failure_channel, v_w.on_failure_payload, NULL::bigint,
                   NULL::bigint, 0, 'lonnymq.workflow_failed:' OPERATOR(pg_catalog.||) v_workflow_id::text,
                   'skip'::text, v_w.on_failure_max_attempts, 1000::bigint, 50::bigint, 1)
         WHERE w.id = v_workflow_id;
    END IF;
    RETURN NULL;
END
$$;

-- A dead step's message left the dead-letter table back into the message table (requeue):
-- the step is queued again, and its workflow runs again once no step of it is dead. (A
-- purged dead message leaves the step dead.)
CREATE FUNCTION lonnymq_workflow_step_requeued_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_workflow_id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = OLD.id) THEN
        RETURN NULL;
    END IF;
    UPDATE lonnymq_workflow_step s SET state = 'queued', finished_at = NULL
     WHERE s.id = OLD.id AND s.state = 'dead'
    RETURNING s.workflow_id INTO v_workflow_id;
    IF v_workflow_id IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE lonnymq_workflow w
       SET dead = w.dead - 1,
           state = CASE WHEN w.state = 'failed' AND w.dead = 1 THEN 'running' ELSE w.state END,
           finished_at = CASE WHEN w.state = 'failed' AND w.dead = 1 THEN NULL ELSE w.finished_at END
     WHERE w.id = v_workflow_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER lonnymq_workflow_step_dead AFTER INSERT ON lonnymq_dead_message
    FOR EACH ROW WHEN (NEW.dedup_key LIKE 'lonnymq.step:%')
    EXECUTE FUNCTION lonnymq_workflow_step_dead_v1();
CREATE TRIGGER lonnymq_workflow_step_requeued AFTER DELETE ON lonnymq_dead_message
    FOR EACH ROW WHEN (OLD.dedup_key LIKE 'lonnymq.step:%')
    EXECUTE FUNCTION lonnymq_workflow_step_requeued_v1();

-- Cancel a workflow: its queued steps' messages are cancelled as lonnymq_cancel_v2 does
-- (waiting ones deleted, running ones marked), its waiting steps and the queued ones whose
-- message is gone become cancelled, and the workflow too. A running step ends dead as
-- 'cancelled' (or succeeds, releasing nothing). Returns the ids of the running steps marked
-- (NOTIFY lonnymq_cancel wakes their workers). A finished (succeeded) workflow is left alone.
CREATE FUNCTION lonnymq_workflow_cancel_v1(p_id bigint) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_state   text;
    v_ids     bigint[];
    v_late    bigint[];
    v_running bigint[];
BEGIN
    SELECT w.state INTO v_state FROM lonnymq_workflow w WHERE w.id = p_id;
    IF v_state IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('workflow_id', 'must name an existing workflow', p_id::text);
    END IF;
    IF v_state IN ('succeeded', 'cancelled') THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- Messages first (the ack's order: messages, steps, workflow).
    SELECT coalesce(pg_catalog.array_agg(s.id ORDER BY s.id), ARRAY[]::bigint[]) INTO v_ids
      FROM lonnymq_workflow_step s WHERE s.workflow_id = p_id AND s.state = 'queued';
    SELECT coalesce(pg_catalog.array_agg(c.id) FILTER (WHERE c.running), ARRAY[]::bigint[]) INTO v_running
      FROM lonnymq_cancel_v2(v_ids, true) c;
    PERFORM 1 FROM lonnymq_workflow_step s WHERE s.workflow_id = p_id ORDER BY s.id FOR UPDATE;
    -- Released after the first look (an ack that committed meanwhile): none can be now.
    SELECT pg_catalog.array_agg(s.id ORDER BY s.id) INTO v_late
      FROM lonnymq_workflow_step s WHERE s.workflow_id = p_id AND s.state = 'queued' AND s.id <> ALL (v_ids);
    IF v_late IS NOT NULL THEN
        SELECT v_running OPERATOR(pg_catalog.||) coalesce(pg_catalog.array_agg(c.id) FILTER (WHERE c.running), ARRAY[]::bigint[])
          INTO v_running FROM lonnymq_cancel_v2(v_late, true) c;
    END IF;
    UPDATE lonnymq_workflow_step s SET state = 'cancelled', payload = NULL, finished_at = pg_catalog.now()
     WHERE s.workflow_id = p_id
       AND (s.state = 'waiting'
            OR (s.state = 'queued' AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = s.id)));
    UPDATE lonnymq_workflow w SET state = 'cancelled', finished_at = pg_catalog.now()
     WHERE w.id = p_id AND w.state IN ('running', 'failed');
    IF pg_catalog.cardinality(v_running) > 0 THEN
        PERFORM pg_catalog.pg_notify('lonnymq_cancel', '');
    END IF;
    RETURN v_running;
END
$$;

-- Delete finished workflows (succeeded, cancelled, failed) finished before p_older_than_ms
-- ago, with their steps, edges and outputs, up to p_limit per call; a workflow with a step
-- message still queued, running or dead is kept. Returns how many were deleted.
CREATE FUNCTION lonnymq_workflow_prune_v1(p_older_than_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n integer;
BEGIN
    PERFORM lonnymq_check_range_v1('older_than', p_older_than_ms, 0::bigint, 31622400000::bigint, false);
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 100000::bigint, false);
    DELETE FROM lonnymq_workflow w
     WHERE w.id IN (
         SELECT x.id FROM lonnymq_workflow x
          WHERE x.finished_at < pg_catalog.clock_timestamp()
                                - pg_catalog.make_interval(secs => p_older_than_ms::double precision / 1000::double precision)
            AND NOT EXISTS (SELECT 1 FROM lonnymq_workflow_step s JOIN lonnymq_message m ON m.id = s.id
                             WHERE s.workflow_id = x.id)
            AND NOT EXISTS (SELECT 1 FROM lonnymq_workflow_step s JOIN lonnymq_dead_message d ON d.id = s.id
                             WHERE s.workflow_id = x.id)
          ORDER BY x.finished_at LIMIT p_limit
            FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- The workflow invariants api.check() adds: a waiting step whose parents have all succeeded
-- (it should have been released), a released step with a parent that has not succeeded, a
-- step whose workflow is missing (steps have no foreign key since 0037), a queued step of a
-- live workflow whose message is neither in the message table nor dead (a purge deleted it).
CREATE FUNCTION lonnymq_workflow_check_v1()
RETURNS TABLE (workflow_id bigint, step_id bigint, queue text, channel text, problem text, detail text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_not_released',
           pg_catalog.format('step %s of workflow %s waits, but its parents have all succeeded', s.name, s.workflow_id)
      FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
     WHERE s.state = 'waiting' AND w.state <> 'cancelled'
       AND NOT EXISTS (SELECT 1 FROM lonnymq_workflow_step p WHERE p.id = ANY (s.parents) AND p.state <> 'succeeded')
    UNION ALL
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_released_early',
           pg_catalog.format('step %s of workflow %s was released, but its parent %s is %s', s.name, s.workflow_id,
                             p.name, p.state)
      FROM lonnymq_workflow_step s
      CROSS JOIN LATERAL pg_catalog.unnest(s.parents) AS e(parent_id)
      JOIN lonnymq_workflow_step p ON p.id = e.parent_id
     WHERE s.releases > 0 AND p.state <> 'succeeded'
    UNION ALL
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_orphaned',
           pg_catalog.format('step %s belongs to workflow %s, which does not exist', s.name, s.workflow_id)
      FROM lonnymq_workflow_step s
     WHERE NOT EXISTS (SELECT 1 FROM lonnymq_workflow w WHERE w.id = s.workflow_id)
    UNION ALL
    SELECT s.workflow_id, s.id, s.queue, s.channel, 'workflow_step_lost',
           pg_catalog.format('step %s of workflow %s is queued, but its message is gone (purged or deleted) '
                             'and not dead: the workflow cannot finish (cancel it)', s.name, s.workflow_id)
      FROM lonnymq_workflow_step s JOIN lonnymq_workflow w ON w.id = s.workflow_id
     WHERE s.state = 'queued' AND w.state <> 'cancelled'
       AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = s.id)
       AND NOT EXISTS (SELECT 1 FROM lonnymq_dead_message d WHERE d.id = s.id)
$$;

-- ---------------------------------------------------------------------------------------
-- Durable handlers (docs/durable.md)
-- ---------------------------------------------------------------------------------------

-- One row per step, sleep or wait a message's handler reached, keyed by the message and the
-- name the handler gave it. No foreign key: rows outlive a message that went dead (a requeue
-- keeps its checkpoints, since it keeps its id), and acks pay nothing for them; the workers'
-- housekeeping deletes the rows of messages that are in neither table
-- (lonnymq_durable_prune_v1). A 'step' row is done when written (its result committed with
-- the step's writes); a 'sleep' or 'wait' row is pending until its time passed or its event
-- came, and then holds the event's payload (NULL: the wait timed out).
CREATE TABLE lonnymq_step (
    message_id  bigint      NOT NULL,
    name        text        NOT NULL,
    kind        text        NOT NULL,
    result      jsonb       NULL,
    event_key   text        NULL,
    until_ms    bigint      NULL,
    done        boolean     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT lonnymq_step_pkey PRIMARY KEY (message_id, name),
    CONSTRAINT lonnymq_step_name_length CHECK (pg_catalog.char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_step_kind_known CHECK (kind IN ('step', 'sleep', 'wait')),
    CONSTRAINT lonnymq_step_wait_has_key CHECK ((kind = 'wait') = (event_key IS NOT NULL)),
    CONSTRAINT lonnymq_step_event_key_length
        CHECK (event_key IS NULL OR pg_catalog.char_length(event_key) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_step_result_size CHECK (result IS NULL OR pg_catalog.pg_column_size(result) <= 1048576),
    CONSTRAINT lonnymq_step_until_range CHECK (until_ms IS NULL OR until_ms BETWEEN 0 AND 253402300799999),
    CONSTRAINT lonnymq_step_done_when_step CHECK (kind <> 'step' OR done),
    CONSTRAINT lonnymq_step_sleep_has_time CHECK (kind <> 'sleep' OR until_ms IS NOT NULL)
);
-- An emit finds its waiters here: one probe, never a scan.
CREATE INDEX lonnymq_step_waiting_idx ON lonnymq_step (event_key) WHERE kind = 'wait' AND NOT done;
-- Suspended messages (a pending sleep or wait), for the counts and the admin.
CREATE INDEX lonnymq_step_pending_idx ON lonnymq_step (message_id) WHERE kind <> 'step' AND NOT done;

-- Events by key: the first emit of a key is kept (later ones are ignored) until it is older
-- than the retention, so a wait that comes after its emit still sees it.
CREATE TABLE lonnymq_event (
    key         text        NOT NULL,
    payload     jsonb       NOT NULL,
    emitted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT lonnymq_event_pkey PRIMARY KEY (key),
    CONSTRAINT lonnymq_event_key_length CHECK (pg_catalog.char_length(key) BETWEEN 1 AND 200),
    CONSTRAINT lonnymq_event_payload_size CHECK (pg_catalog.pg_column_size(payload) <= 1048576)
);
CREATE INDEX lonnymq_event_emitted_idx ON lonnymq_event (emitted_at);

-- Advisory lock namespace of event keys: an emit and a wait's first look at its event hold
-- the key's lock until they end, so a wait never misses an emit that commits meanwhile.
CREATE FUNCTION lonnymq_event_lock_ns_v1() RETURNS integer
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$ SELECT 1280135476 $$;

CREATE FUNCTION lonnymq_check_step_name_v1(p_field text, p_name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_name IS NULL OR pg_catalog.char_length(p_name) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1(p_field, 'must be 1 to 200 characters',
                                         coalesce(pg_catalog.quote_literal(p_name), 'NULL'));
    END IF;
END
$$;

-- Checkpoint a step's result in the caller's transaction (the one holding the step's own
-- writes), while the caller still holds the message's lease: a worker that lost its lease
-- commits nothing of the step. A name already checkpointed is refused (LQ001).
CREATE FUNCTION lonnymq_step_save_v1(p_id bigint, p_token uuid, p_name text, p_result jsonb) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_token uuid;
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    IF p_result IS NOT NULL AND pg_catalog.pg_column_size(p_result) > 1048576 THEN
        PERFORM lonnymq_raise_invalid_v1('result', 'must be at most 1 MiB stored',
                                         pg_catalog.pg_column_size(p_result)::text);
    END IF;
    SELECT m.lease_token INTO v_token FROM lonnymq_message m WHERE m.id = p_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id USING ERRCODE = 'LQ004';
    END IF;
    IF v_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    INSERT INTO lonnymq_step (message_id, name, kind, result, done)
    VALUES (p_id, p_name, 'step', p_result, true)
    ON CONFLICT (message_id, name) DO NOTHING;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'is already a checkpoint of this message',
                                         pg_catalog.quote_literal(p_name));
    END IF;
END
$$;

-- A handler reaches a sleep (p_key NULL) or a wait for the event p_key. p_delay_ms: how long
-- the sleep lasts or the wait may take (NULL: a wait without a timeout), from the first time
-- it is reached: a re-run keeps the time of the first. Returns
--   'go', NULL       a sleep whose time has passed: go on;
--   'event', payload a wait whose event came (before or after the wait);
--   'timeout', NULL  a wait whose time passed without its event;
--   'suspend', until the message must be suspended until then (NULL: until its event).
-- The caller holds the lease (checked). Writes the row in the caller's transaction.
CREATE FUNCTION lonnymq_durable_pause_v1(p_id bigint, p_token uuid, p_name text, p_key text, p_delay_ms bigint)
RETURNS TABLE (state text, result jsonb, until_ms bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now   bigint := lonnymq_now_ms_v1();
    v_kind  text := CASE WHEN p_key IS NULL THEN 'sleep' ELSE 'wait' END;
    v_token uuid;
    v_row   record;
    v_event jsonb;
    p_until_ms bigint;
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    IF p_key IS NOT NULL AND pg_catalog.char_length(p_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('key', 'must be 1 to 200 characters', pg_catalog.quote_literal(p_key));
    END IF;
    IF p_key IS NULL AND p_delay_ms IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('delay', 'must be given for a sleep', 'NULL');
    END IF;
    PERFORM lonnymq_check_range_v1(CASE WHEN p_key IS NULL THEN 'delay' ELSE 'timeout' END, p_delay_ms,
                                   0::bigint, 31622400000::bigint, true);
    p_until_ms := v_now + p_delay_ms;
    SELECT m.lease_token INTO v_token FROM lonnymq_message m WHERE m.id = p_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id USING ERRCODE = 'LQ004';
    END IF;
    IF v_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    IF p_key IS NOT NULL THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_event_lock_ns_v1(), pg_catalog.hashtext(p_key));
    END IF;
    SELECT s.kind, s.result, s.event_key, s.until_ms, s.done INTO v_row
      FROM lonnymq_step s WHERE s.message_id = p_id AND s.name = p_name FOR UPDATE;
    IF FOUND THEN
        IF v_row.kind <> v_kind THEN
            PERFORM lonnymq_raise_invalid_v1('name', pg_catalog.format('is already a %s of this message', v_row.kind),
                                             pg_catalog.quote_literal(p_name));
        END IF;
        IF v_row.done THEN
            RETURN QUERY SELECT CASE WHEN v_kind = 'sleep' THEN 'go' WHEN v_row.result IS NULL THEN 'timeout'
                                     ELSE 'event' END, v_row.result, v_row.until_ms;
            RETURN;
        END IF;
        IF v_row.until_ms IS NOT NULL AND v_row.until_ms <= v_now THEN
            UPDATE lonnymq_step s SET done = true WHERE s.message_id = p_id AND s.name = p_name;
            RETURN QUERY SELECT CASE WHEN v_kind = 'sleep' THEN 'go' ELSE 'timeout' END, NULL::jsonb, v_row.until_ms;
            RETURN;
        END IF;
        RETURN QUERY SELECT 'suspend'::text, NULL::jsonb, v_row.until_ms;
        RETURN;
    END IF;
    IF p_key IS NOT NULL THEN
        SELECT e.payload INTO v_event FROM lonnymq_event e WHERE e.key = p_key;
        IF FOUND THEN
            INSERT INTO lonnymq_step (message_id, name, kind, result, event_key, until_ms, done)
            VALUES (p_id, p_name, 'wait', v_event, p_key, p_until_ms, true);
            RETURN QUERY SELECT 'event'::text, v_event, p_until_ms;
            RETURN;
        END IF;
    END IF;
    INSERT INTO lonnymq_step (message_id, name, kind, event_key, until_ms, done)
    VALUES (p_id, p_name, v_kind, p_key, p_until_ms, p_key IS NULL AND p_until_ms <= v_now);
    IF p_key IS NULL AND p_until_ms <= v_now THEN
        RETURN QUERY SELECT 'go'::text, NULL::jsonb, p_until_ms;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'suspend'::text, NULL::jsonb, p_until_ms;
END
$$;

-- The worker ends a run that slept or waited on p_name: the message goes back without
-- spending the attempt, its slots given back, due when the sleep ends or the wait times out
-- (9999-12-31 for a wait without a timeout: an emit or "resume now" makes it due). It stays
-- in its channel, so it is served in its channel's turn when it resumes. A wait whose event
-- came while the handler ran is due at once (the row is read FOR SHARE: an emit that
-- marked it and has not committed yet is waited for). A message someone asked to cancel is
-- dead-lettered as 'cancelled'. Returns 'suspended' or 'dead'.
CREATE FUNCTION lonnymq_suspend_v1(p_id bigint, p_token uuid, p_name text, p_tolerance_ms bigint DEFAULT 50)
RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_msg record;
    v_row record;
    v_at  bigint;
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    SELECT m.id, m.lease_token, m.cancel_requested INTO v_msg FROM lonnymq_message m WHERE m.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'message % does not exist (acked, cancelled or dead)', p_id USING ERRCODE = 'LQ004';
    END IF;
    IF v_msg.lease_token IS DISTINCT FROM p_token THEN
        RAISE EXCEPTION 'lease on message % is stale: it expired and the message was released again', p_id
            USING ERRCODE = 'LQ003';
    END IF;
    SELECT s.until_ms, s.done INTO v_row FROM lonnymq_step s
     WHERE s.message_id = p_id AND s.name = p_name AND s.kind <> 'step' FOR SHARE;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'names no sleep or wait of this message', pg_catalog.quote_literal(p_name));
    END IF;
    v_at := CASE WHEN v_row.done THEN lonnymq_now_ms_v1()
                 ELSE coalesce(v_row.until_ms, 253402300799999) END;
    PERFORM lonnymq_unlease_v1(ARRAY[p_id], ARRAY[v_at], NULL, true, p_tolerance_ms);
    RETURN CASE WHEN v_msg.cancel_requested THEN 'dead' ELSE 'suspended' END;
END
$$;

-- Emit the event p_key, in the caller's transaction: the first emit of a key is stored
-- (a later one, while the first is kept, changes nothing and returns NULL); its waiters get
-- the payload and are made due now, which they see when the caller commits (a rollback
-- wakes nobody). Waiters are found through lonnymq_step_waiting_idx. Their channels are
-- woken as an enqueue wakes them (a mark, no channel row lock held until the caller's
-- commit). Returns the ids of the waiting messages it woke.
CREATE FUNCTION lonnymq_emit_event_v1(p_key text, p_payload jsonb, p_tolerance_ms bigint DEFAULT 50)
RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
    v_ids bigint[];
    v_ch  record;
BEGIN
    IF p_key IS NULL OR pg_catalog.char_length(p_key) NOT BETWEEN 1 AND 200 THEN
        PERFORM lonnymq_raise_invalid_v1('key', 'must be 1 to 200 characters', coalesce(pg_catalog.quote_literal(p_key), 'NULL'));
    END IF;
    IF p_payload IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must not be SQL NULL (JSON null is jsonb ''null'')', 'NULL');
    ELSIF pg_catalog.jsonb_path_exists(p_payload, 'strict $.**{101}'::jsonpath) THEN
        PERFORM lonnymq_raise_too_deep_v1('payload'::text, p_payload);
    ELSIF pg_catalog.pg_column_size(p_payload) > 1048576 THEN
        PERFORM lonnymq_raise_invalid_v1('payload', 'must be at most 1 MiB stored', pg_catalog.pg_column_size(p_payload)::text);
    END IF;
    PERFORM lonnymq_check_range_v1('tolerance', p_tolerance_ms, 0::bigint, 86400000::bigint, false);
    PERFORM pg_catalog.pg_advisory_xact_lock(lonnymq_event_lock_ns_v1(), pg_catalog.hashtext(p_key));
    INSERT INTO lonnymq_event (key, payload) VALUES (p_key, p_payload) ON CONFLICT (key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH woken AS (
        UPDATE lonnymq_step s SET done = true, result = p_payload
         WHERE s.event_key = p_key AND s.kind = 'wait' AND NOT s.done
        RETURNING s.message_id
    )
    SELECT pg_catalog.array_agg(woken.message_id ORDER BY woken.message_id) INTO v_ids FROM woken;
    IF v_ids IS NULL THEN
        RETURN ARRAY[]::bigint[];
    END IF;
    -- The producer's shared locks on the channels, then the messages: a suspended one is
    -- made due now (a running one is not touched: its worker's suspend finds the row done).
    PERFORM lonnymq_lock_channels_v1(pg_catalog.array_agg(m.channel_id))
       FROM lonnymq_message m WHERE m.id = ANY (v_ids) AND m.lease_token IS NULL HAVING pg_catalog.count(*) > 0;
    FOR v_ch IN
        WITH moved AS (
            UPDATE lonnymq_message m SET dequeue_at = v_now
             WHERE m.id = ANY (v_ids) AND m.lease_until IS NULL AND m.lease_token IS NULL AND m.dequeue_at > v_now
            RETURNING m.channel_id
        )
        SELECT DISTINCT moved.channel_id, c.queue FROM moved JOIN lonnymq_channel c ON c.id = moved.channel_id
         ORDER BY moved.channel_id
    LOOP
        PERFORM lonnymq_mark_v1(v_ch.queue, v_ch.channel_id, v_now, p_tolerance_ms);
    END LOOP;
    -- A waiter that holds its ordered channel kept its place at the head: the hold ends now.
    FOR v_ch IN SELECT l.channel_id, l.queue FROM lonnymq_lift_holds_v1(v_ids) l LOOP
        PERFORM lonnymq_mark_v1(v_ch.queue, v_ch.channel_id, v_now, p_tolerance_ms);
    END LOOP;
    RETURN v_ids;
END
$$;

-- "Resume now" (the admin, tests): the pending sleeps of these messages end now and their
-- pending waits time out now (the handler's wait returns None); the messages are due now.
-- Returns the ids made due.
CREATE FUNCTION lonnymq_resume_v1(p_ids bigint[], p_tolerance_ms bigint DEFAULT 50) RETURNS bigint[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now bigint := lonnymq_now_ms_v1();
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    UPDATE lonnymq_step s SET until_ms = v_now
     WHERE s.message_id = ANY (p_ids) AND s.kind <> 'step' AND NOT s.done
       AND (s.until_ms IS NULL OR s.until_ms > v_now);
    RETURN lonnymq_run_now_v1(p_ids, p_tolerance_ms);
END
$$;

-- "Run again from step X": forget the checkpoint p_name of a message and every one written
-- after it, so the next run does them again. Returns the names forgotten.
CREATE FUNCTION lonnymq_forget_steps_v1(p_id bigint, p_name text) RETURNS text[]
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_from  timestamptz;
    v_names text[];
BEGIN
    PERFORM lonnymq_check_step_name_v1('name', p_name);
    SELECT s.created_at INTO v_from FROM lonnymq_step s WHERE s.message_id = p_id AND s.name = p_name;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('name', 'names no checkpoint of this message', pg_catalog.quote_literal(p_name));
    END IF;
    WITH gone AS (
        DELETE FROM lonnymq_step s WHERE s.message_id = p_id AND s.created_at >= v_from RETURNING s.name, s.created_at
    )
    SELECT pg_catalog.array_agg(gone.name ORDER BY gone.created_at) INTO v_names FROM gone;
    RETURN v_names;
END
$$;

-- Housekeeping: events older than the retention, and checkpoints of messages that are gone
-- (acked, or dead and then deleted), at most p_limit of each per call. Returns how many rows.
CREATE FUNCTION lonnymq_durable_prune_v1(p_event_retention_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_events integer;
    v_steps  integer;
BEGIN
    PERFORM lonnymq_check_range_v1('event_retention', p_event_retention_ms, 0::bigint, 3155760000000::bigint, false);
    PERFORM lonnymq_check_range_v1('limit', p_limit::bigint, 1::bigint, 100000::bigint, false);
    DELETE FROM lonnymq_event e
     WHERE e.key IN (SELECT o.key FROM lonnymq_event o
                      WHERE o.emitted_at < pg_catalog.now() - pg_catalog.make_interval(secs => p_event_retention_ms / 1000.0)
                      ORDER BY o.emitted_at LIMIT p_limit);
    GET DIAGNOSTICS v_events = ROW_COUNT;
    DELETE FROM lonnymq_step s
     WHERE s.message_id IN (SELECT DISTINCT o.message_id FROM lonnymq_step o
                             WHERE NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = o.message_id)
                               AND NOT EXISTS (SELECT 1 FROM lonnymq_dead_message d WHERE d.id = o.message_id)
                             LIMIT p_limit);
    GET DIAGNOSTICS v_steps = ROW_COUNT;
    RETURN v_events + v_steps;
END
$$;

-- Take p_tokens tokens of a channel's token bucket for work done outside a job (a web
-- request of the same tenant), so that jobs and callers spend one budget. The bucket is the
-- one lonnymq_dequeue_v1 refills and spends, read with the same formula under the same row
-- lock: all or nothing. Taken, the channel's bucket and next turn move as after a release;
-- refused, nothing is written and retry_after_ms says when the tokens will be there (if no
-- job takes them first). The queue-wide bucket is not spent: it limits what the workers
-- release, not the tenant's budget (docs/limits-and-progress.md).
CREATE FUNCTION lonnymq_consume_v1(p_queue text, p_channel text, p_tokens integer)
RETURNS TABLE (ok boolean, retry_after_ms bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_c     lonnymq_channel%ROWTYPE;
    v_now   bigint;
    v_full  bigint;
    v_level bigint;
    v_cost  bigint;
BEGIN
    IF p_tokens IS NULL OR p_tokens < 1 OR p_tokens > 1000000 THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must be an integer from 1 to 1000000',
                                         coalesce(p_tokens::text, 'null'));
    END IF;
    -- Waits for a dequeuer holding the row (it holds it for one call); a dequeuer that
    -- finds it held skips the channel this time.
    SELECT * INTO v_c FROM lonnymq_channel c
     WHERE c.queue = p_queue AND c.name = p_channel
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('channel', 'must name a channel of queue '
                                         || pg_catalog.quote_literal(coalesce(p_queue, '')),
                                         pg_catalog.quote_nullable(p_channel));
    END IF;
    IF v_c.rate_count IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('channel', 'must have a rate limit to consume from',
                                         pg_catalog.quote_literal(p_channel));
    END IF;
    IF p_tokens > v_c.rate_burst THEN
        PERFORM lonnymq_raise_invalid_v1('tokens', 'must be at most the bucket''s capacity (burst '
                                         || v_c.rate_burst || ')', p_tokens::text);
    END IF;
    -- Never refill from a release "after" this call's clock reading: read the bucket at the
    -- later of the two, as the dequeue refuses to pick such a channel.
    v_now := greatest(lonnymq_now_ms_v1(), coalesce(v_c.last_dequeue_at, 0));
    v_full := v_c.rate_burst::bigint * v_c.rate_period_ms;
    v_level := CASE WHEN v_c.bucket_level IS NULL OR v_c.last_dequeue_at IS NULL THEN v_full
                    ELSE least(v_full, v_c.bucket_level + least(v_now - v_c.last_dequeue_at, v_full)
                                                          * v_c.rate_count::bigint) END;
    v_cost := p_tokens::bigint * v_c.rate_period_ms;
    IF v_level < v_cost THEN
        RETURN QUERY SELECT false, (v_cost - v_level + v_c.rate_count - 1) / v_c.rate_count;
        RETURN;
    END IF;
    v_level := v_level - v_cost;
    -- As a release: the bucket's fill now, its next token, and the channel's next turn no
    -- earlier than that token (the dequeue would find it empty before).
    UPDATE lonnymq_channel c
       SET bucket_level = v_level,
           last_dequeue_at = v_now,
           next_token_at = n.token_at,
           next_dequeue_at = CASE WHEN c.next_dequeue_at IS NULL THEN NULL
                                  ELSE greatest(c.next_dequeue_at, n.token_at) END
      FROM (SELECT CASE WHEN v_level >= v_c.rate_period_ms THEN v_now
                        ELSE v_now + (v_c.rate_period_ms - v_level + v_c.rate_count - 1) / v_c.rate_count
                   END AS token_at) n
     WHERE c.id = v_c.id;
    RETURN QUERY SELECT true, 0::bigint;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Progress (message.progress(), docs/limits-and-progress.md)
-- ---------------------------------------------------------------------------------------

-- How far a message's handler got: one row per message, written by its worker at most once
-- per LONNYMQ_PROGRESS_INTERVAL (handlers report to the worker in memory; the worker writes
-- every message's latest report in one call) and once more when the run ends. Apart from
-- lonnymq_message, so a report never writes the queue's hot table (nor its indexes), and kept
-- after the message is gone: the workers' housekeeping deletes rows older than
-- LONNYMQ_PROGRESS_RETENTION whose message is neither waiting, running nor dead
-- (lonnymq_progress_prune_v1). No foreign key, so acks pay nothing for it.
CREATE TABLE lonnymq_progress (
    message_id  bigint           NOT NULL,
    queue       text             NOT NULL,
    channel     text             NOT NULL,
    done        double precision NOT NULL,
    total       double precision NULL,
    note        text             NOT NULL DEFAULT '',
    updated_at  bigint           NOT NULL,
    CONSTRAINT lonnymq_progress_pkey PRIMARY KEY (message_id),
    -- NaN sorts above every number in PostgreSQL: "<= 1e15" refuses it, and infinity.
    CONSTRAINT lonnymq_progress_done_range CHECK (done >= 0::double precision AND done <= 1e15::double precision),
    CONSTRAINT lonnymq_progress_total_range CHECK (total IS NULL OR (total > 0::double precision AND total <= 1e15::double precision)),
    CONSTRAINT lonnymq_progress_done_within_total CHECK (total IS NULL OR done <= total),
    CONSTRAINT lonnymq_progress_note_length CHECK (pg_catalog.char_length(note) <= 200),
    CONSTRAINT lonnymq_progress_updated_range CHECK (updated_at BETWEEN 0 AND 253402300799999)
);
-- The dashboard's latest reports of a queue; the prune's oldest rows.
CREATE INDEX lonnymq_progress_queue_idx ON lonnymq_progress (queue, updated_at);
CREATE INDEX lonnymq_progress_updated_idx ON lonnymq_progress (updated_at);

-- Record the latest progress of several messages in one call (a worker's reports since its
-- last write; eager mode's one report). Each report is checked as the table's CHECKs do,
-- naming the field, before anything is written. A message reported twice keeps its last report.
CREATE FUNCTION lonnymq_progress_v1(
    p_ids bigint[], p_queues text[], p_channels text[], p_done double precision[],
    p_totals double precision[], p_notes text[]
) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_n   integer := coalesce(pg_catalog.cardinality(p_ids), 0);
    v_bad record;
    v_written integer;
BEGIN
    PERFORM lonnymq_check_list_v1('ids', pg_catalog.array_ndims(p_ids));
    IF coalesce(pg_catalog.cardinality(p_queues), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_channels), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_done), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_totals), 0) <> v_n
       OR coalesce(pg_catalog.cardinality(p_notes), 0) <> v_n THEN
        PERFORM lonnymq_raise_invalid_v1('progress', 'must give one queue, channel, done, total and note per id',
                                         v_n::text || ' ids');
    END IF;
    SELECT u.* INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_done), pg_catalog.unnest(p_totals),
                      pg_catalog.unnest(p_notes)) AS u(id, done, total, note)
     WHERE u.id IS NULL OR u.done IS NULL OR NOT (u.done >= 0::double precision AND u.done <= 1e15::double precision)
        OR (u.total IS NOT NULL AND NOT (u.total > 0::double precision AND u.total <= 1e15::double precision))
        OR u.done > u.total OR u.note IS NULL OR pg_catalog.char_length(u.note) > 200
     LIMIT 1;
    IF FOUND THEN
        IF v_bad.id IS NULL THEN
            PERFORM lonnymq_raise_invalid_v1('id', 'must not be null', NULL);
        ELSIF v_bad.done IS NULL OR NOT (v_bad.done >= 0::double precision AND v_bad.done <= 1e15::double precision) THEN
            PERFORM lonnymq_raise_invalid_v1('done', 'must be a finite number from 0 to 1e15', v_bad.done::text);
        ELSIF v_bad.total IS NOT NULL AND NOT (v_bad.total > 0::double precision AND v_bad.total <= 1e15::double precision) THEN
            PERFORM lonnymq_raise_invalid_v1('total', 'must be a finite number above 0, at most 1e15',
                                             v_bad.total::text);
        ELSIF v_bad.done > v_bad.total THEN
            PERFORM lonnymq_raise_invalid_v1('done', 'must be at most total (' || v_bad.total::text || ')',
                                             v_bad.done::text);
        ELSE
            PERFORM lonnymq_raise_invalid_v1('note', 'must be at most 200 characters',
                                             coalesce(pg_catalog.char_length(v_bad.note)::text || ' characters', 'null'));
        END IF;
    END IF;
    PERFORM lonnymq_check_names_v1(q, c)
       FROM ROWS FROM (pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels)) AS n(q, c);
    INSERT INTO lonnymq_progress AS p (message_id, queue, channel, done, total, note, updated_at)
    SELECT DISTINCT ON (u.id) u.id, u.queue, u.channel, u.done, u.total, u.note, lonnymq_now_ms_v1()
      FROM ROWS FROM (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_queues), pg_catalog.unnest(p_channels),
                      pg_catalog.unnest(p_done), pg_catalog.unnest(p_totals), pg_catalog.unnest(p_notes))
           WITH ORDINALITY AS u(id, queue, channel, done, total, note, ord)
     ORDER BY u.id, u.ord DESC
    ON CONFLICT (message_id) DO UPDATE
       SET queue = EXCLUDED.queue, channel = EXCLUDED.channel, done = EXCLUDED.done,
           total = EXCLUDED.total, note = EXCLUDED.note, updated_at = EXCLUDED.updated_at;
    GET DIAGNOSTICS v_written = ROW_COUNT;
    RETURN v_written;
END
$$;

-- Progress rows older than p_retention_ms whose message is gone (acked, purged): at most
-- p_limit a call, oldest first. A message still waiting, running or dead keeps its row.
CREATE FUNCTION lonnymq_progress_prune_v1(p_retention_ms bigint, p_limit integer) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_deleted integer;
BEGIN
    PERFORM lonnymq_check_range_v1('retention', p_retention_ms, 0::bigint, 3155760000000::bigint, false);
    DELETE FROM lonnymq_progress p
     WHERE p.message_id IN (
        SELECT o.message_id FROM lonnymq_progress o
         WHERE o.updated_at < lonnymq_now_ms_v1() - p_retention_ms
           AND NOT EXISTS (SELECT 1 FROM lonnymq_message m WHERE m.id = o.message_id)
           AND NOT EXISTS (SELECT 1 FROM lonnymq_dead_message d WHERE d.id = o.message_id)
         ORDER BY o.updated_at
         LIMIT greatest(p_limit, 0)
           FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    RETURN v_deleted;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Strict order (configure_channel(ordered=True), docs/limits-and-progress.md)
-- ---------------------------------------------------------------------------------------

-- Make a channel ordered, or not. An ordered channel releases one message at a time (the
-- caller set max_concurrency 1 in the same transaction: lonnymq_channel_ordered_one_at_a_time),
-- in release order; a retry or a snooze holds it, a dead message blocks it. Turning it off
-- lifts any hold or block at once and wakes the channel. Either way the setting becomes the
-- channel's own (own_ordered): its plan's ordered no longer changes it (configure_channel's
-- inherit 'ordered' makes it follow the plan again). The channel must exist (LQ001).
CREATE FUNCTION lonnymq_order_channel_v1(p_queue text, p_channel text, p_ordered boolean) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    IF p_ordered IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('ordered', 'must be true or false', NULL);
    END IF;
    UPDATE lonnymq_channel c
       SET ordered = p_ordered,
           own_ordered = true,
           hold_until = CASE WHEN p_ordered THEN c.hold_until END,
           blocked_by = CASE WHEN p_ordered THEN c.blocked_by END
     WHERE c.queue = p_queue AND c.name = p_channel
    RETURNING c.id INTO v_id;
    IF v_id IS NULL THEN
        PERFORM lonnymq_raise_invalid_v1('channel', pg_catalog.format('must name a channel of queue %s',
                                         pg_catalog.quote_literal(p_queue)), pg_catalog.quote_literal(p_channel));
    END IF;
    IF NOT p_ordered AND lonnymq_wake_v1(v_id, lonnymq_now_ms_v1(), 0::bigint) THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
END
$$;

-- Skip the dead message that blocks an ordered channel: the channel goes on with the messages
-- after it (the dead one stays in the dead letters). Returns the id of the message skipped,
-- NULL when the channel was not blocked. The channel must exist (LQ001).
CREATE FUNCTION lonnymq_unblock_channel_v1(p_queue text, p_channel text) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    v_c lonnymq_channel%ROWTYPE;
BEGIN
    PERFORM lonnymq_check_names_v1(p_queue, p_channel);
    SELECT * INTO v_c FROM lonnymq_channel c WHERE c.queue = p_queue AND c.name = p_channel FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM lonnymq_raise_invalid_v1('channel', pg_catalog.format('must name a channel of queue %s',
                                         pg_catalog.quote_literal(p_queue)), pg_catalog.quote_literal(p_channel));
    END IF;
    IF v_c.blocked_by IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE lonnymq_channel c SET hold_until = NULL, blocked_by = NULL WHERE c.id = v_c.id;
    IF lonnymq_wake_v1(v_c.id, lonnymq_now_ms_v1(), 0::bigint) THEN
        PERFORM pg_catalog.pg_notify('lonnymq_wakeup', p_queue);
    END IF;
    RETURN v_c.blocked_by;
END
$$;
