-- django-lonnymq 0048, reversed: the progress table and its functions go.
DROP FUNCTION IF EXISTS lonnymq_progress_prune_v1(bigint, integer);
DROP FUNCTION IF EXISTS lonnymq_progress_v1(bigint[], text[], text[], double precision[], double precision[], text[]);
DROP TABLE IF EXISTS lonnymq_progress;
