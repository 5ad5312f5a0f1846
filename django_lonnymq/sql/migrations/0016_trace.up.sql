-- django-lonnymq 0016: the trace context of messages enqueued inside an OpenTelemetry span.

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
