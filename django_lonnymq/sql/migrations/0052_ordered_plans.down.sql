-- django-lonnymq 0052, reversed (after the replaced functions' earlier bodies are back): the
-- plan's order and the channel's own_ordered go. A channel a plan ordered stays ordered, with
-- its cap of 1, as if configure_channel had ordered it (configure_channel(ordered=False) ends
-- it); lonnymq_configure_plan_v1, which the code before it calls, was never dropped.
DROP FUNCTION IF EXISTS lonnymq_configure_plan_v2(text, integer, integer, boolean, bigint, integer, bigint, integer,
                                                  boolean, boolean);
ALTER TABLE lonnymq_channel DROP COLUMN own_ordered;
ALTER TABLE lonnymq_plan
    DROP CONSTRAINT lonnymq_plan_ordered_one_at_a_time,
    DROP COLUMN ordered;
