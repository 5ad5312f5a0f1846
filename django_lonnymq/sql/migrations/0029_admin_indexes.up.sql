-- Frozen history: what this migration ran when it was released (a test pins this file).
-- The live definition of every table and function is in ../schema.sql.
--
-- django-lonnymq 0029: indexes for the dead-letter list's order and filters, so its page is
-- a walk of an index, newest first, that stops at the page's end, however many dead letters
-- there are (docs/admin.md, "At size").
-- - lonnymq_dead_died_idx (new): the list unfiltered, or by reason.
-- - lonnymq_dead_queue_channel_idx (new): the list by queue and channel.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);

CREATE INDEX lonnymq_dead_died_idx ON lonnymq_dead_message (died_at);
CREATE INDEX lonnymq_dead_queue_channel_idx ON lonnymq_dead_message (queue, channel, died_at);
