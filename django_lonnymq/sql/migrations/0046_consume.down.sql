-- django-lonnymq 0046, reversed: api.consume's function goes.
DROP FUNCTION IF EXISTS lonnymq_consume_v1(text, text, integer);
