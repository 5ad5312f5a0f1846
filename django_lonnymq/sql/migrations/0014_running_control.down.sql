-- django-lonnymq 0014, reversed: drops this migration's functions and column (the reverse then
-- reinstalls lonnymq_bury_v1 and lonnymq_unlease_v1 as the migrations before left them, with the search_path
-- pinned below). Dead messages with a reason the older schema does not know are kept, as
-- 'failed'.
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);
DROP FUNCTION IF EXISTS lonnymq_cancel_v2(bigint[], boolean);
DROP FUNCTION IF EXISTS lonnymq_fail_v2(bigint, uuid, text, bigint, text, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_extend_v2(bigint[], uuid[], bigint);
ALTER TABLE lonnymq_dead_message DROP CONSTRAINT lonnymq_dead_message_reason_known;
UPDATE lonnymq_dead_message SET reason = 'failed' WHERE reason IN ('timeout', 'cancelled');
ALTER TABLE lonnymq_dead_message
    ADD CONSTRAINT lonnymq_dead_message_reason_known CHECK (reason IN ('failed', 'discarded', 'lease_expired'));
ALTER TABLE lonnymq_message DROP COLUMN cancel_requested;
