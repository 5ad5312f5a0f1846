-- django-lonnymq 0017, reversed: drops what 0017_schedule_hardening.up.sql created, and pins
-- the search_path the bodies 0011 installed are put back under (the migration's reverse
-- appends them after this file).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);
DROP FUNCTION IF EXISTS lonnymq_sync_schedules_v2(text[], text[], jsonb[], bigint[]);
