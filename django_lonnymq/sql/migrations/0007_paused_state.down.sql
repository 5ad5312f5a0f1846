-- django-lonnymq 0007, reversed: drops 0007's functions and the samples' paused column
-- (the reverse then reinstalls lonnymq_queue_stats_v1 as 0006 left it).
DROP FUNCTION IF EXISTS lonnymq_record_samples_v2(bigint);
DROP FUNCTION IF EXISTS lonnymq_queue_stats_v2(text[]);
ALTER TABLE lonnymq_queue_sample DROP COLUMN IF EXISTS paused;
-- lonnymq_queue_stats_v1, reinstalled next, pins the app's schema as 0006 did.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);
