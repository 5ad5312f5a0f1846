-- django-lonnymq 0049, reversed (after the replaced functions' earlier bodies are back): the
-- enqueues that take a cost, and the cost columns, go.
DROP FUNCTION IF EXISTS lonnymq_enqueue_many_v3(text, text[], jsonb[], bigint[], bigint[], integer[], text[], text[],
                                                integer[], integer, bigint, bigint, integer[]);
DROP FUNCTION IF EXISTS lonnymq_enqueue_v3(text, text, jsonb, bigint, bigint, integer, text, text, integer, bigint,
                                           bigint, integer);
DROP FUNCTION IF EXISTS lonnymq_enqueue_keyed_v2(bigint, text, text, bigint, jsonb, bigint, integer, integer, integer);
DROP FUNCTION IF EXISTS lonnymq_check_costs_v1(text, bigint[], integer[], boolean);
ALTER TABLE lonnymq_dead_message DROP CONSTRAINT lonnymq_dead_message_cost_range, DROP COLUMN cost;
ALTER TABLE lonnymq_message DROP CONSTRAINT lonnymq_message_cost_range, DROP COLUMN cost;
