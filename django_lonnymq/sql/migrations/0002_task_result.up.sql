-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0002: results of Django Tasks run on the queue (django_lonnymq.tasks).
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
