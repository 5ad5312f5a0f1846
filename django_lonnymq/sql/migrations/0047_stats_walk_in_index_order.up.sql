-- lonnymq_queue_stats_v3's bounded walk reads each channel in index order and stops at its
-- limit. With a custom plan (the first calls of a session) PostgreSQL chose a bitmap scan and
-- a sort for each channel it visited, which read every entry of that channel: the walk's work
-- grew with the largest channel's backlog. The body is unchanged; only its settings.
ALTER FUNCTION lonnymq_queue_stats_v3(text[], bigint) SET enable_bitmapscan = off;
ALTER FUNCTION lonnymq_queue_stats_v3(text[], bigint) SET enable_sort = off;
