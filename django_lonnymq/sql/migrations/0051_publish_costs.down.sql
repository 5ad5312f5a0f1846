-- django-lonnymq 0051, reversed: the publish that takes a cost goes (lonnymq_publish_v2,
-- which the code before it calls, was never dropped).
DROP FUNCTION IF EXISTS lonnymq_publish_v3(text, text[], jsonb[], bigint[], text[], text[], integer, bigint, bigint,
                                           integer[]);
