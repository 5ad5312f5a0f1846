-- django-lonnymq 0007, reversed: folds the releases counted away from the channel rows into
-- released_total, drops 0007's new functions and table; then the reverse reinstalls the
-- functions 0007 replaced as the migrations before it left them (with the search_path
-- set here, which their SET search_path FROM CURRENT takes).
SELECT pg_catalog.set_config('search_path',
                             pg_catalog.quote_ident(pg_catalog.current_schema()) || ', pg_temp', true);
UPDATE lonnymq_channel c SET released_total = c.released_total + r.n
  FROM (SELECT rc.channel_id, pg_catalog.sum(rc.released)::bigint AS n FROM lonnymq_release_count rc
         GROUP BY rc.channel_id) r
 WHERE c.id = r.channel_id;
DROP FUNCTION IF EXISTS lonnymq_dequeue_held_v1(text, integer, bigint, bigint, text, uuid);
DROP FUNCTION IF EXISTS lonnymq_lease_lock_ns_v1();
DROP TABLE IF EXISTS lonnymq_release_count;
