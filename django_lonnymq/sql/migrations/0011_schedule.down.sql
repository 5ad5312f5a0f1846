-- django-lonnymq 0011, reversed: drops everything 0011_schedule.up.sql created.
DROP FUNCTION IF EXISTS lonnymq_sync_schedules_v1(text[], jsonb[], bigint[]);
DROP FUNCTION IF EXISTS lonnymq_fire_schedule_v1(bigint, bigint, bigint[], bigint, text, integer, bigint, bigint);
DROP TABLE IF EXISTS lonnymq_schedule;
