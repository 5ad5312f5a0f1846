-- django-lonnymq 0025, reversed: drops the functions it added (the v1 functions were left
-- as they were).
DROP FUNCTION IF EXISTS lonnymq_publish_v2(text, text[], jsonb[], bigint[], text[], text[], integer, bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_enqueue_many_v2(text, text[], jsonb[], bigint[], bigint[], integer[], text[], text[],
                                                integer[], integer, bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_enqueue_v2(text, text, jsonb, bigint, bigint, integer, text, text, integer, bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_enqueue_keyed_v1(bigint, text, text, bigint, jsonb, bigint, integer, integer);
