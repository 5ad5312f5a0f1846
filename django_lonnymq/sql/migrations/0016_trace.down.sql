-- django-lonnymq 0016, reversed: drops what 0016_trace.up.sql created.
DROP TABLE IF EXISTS lonnymq_trace;
