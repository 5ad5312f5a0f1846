-- django-lonnymq 0031, reversed: drops the keyed task enqueue and the result's message index.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

DROP FUNCTION IF EXISTS lonnymq_enqueue_task_keyed_v1(text, text, jsonb, bigint, integer, integer, timestamptz,
                                                      timestamptz, text, text, bigint, bigint);
DROP INDEX IF EXISTS lonnymq_task_message_idx;
