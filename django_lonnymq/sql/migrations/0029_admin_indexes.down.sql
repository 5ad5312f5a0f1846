-- django-lonnymq 0029, reversed: drops the dead-letter list's indexes.
DROP INDEX IF EXISTS lonnymq_dead_queue_channel_idx;
DROP INDEX IF EXISTS lonnymq_dead_died_idx;
