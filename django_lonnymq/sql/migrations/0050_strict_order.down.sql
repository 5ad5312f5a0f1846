-- django-lonnymq 0050, reversed (after the replaced functions' earlier bodies are back): the
-- strict order's functions, index and columns go.
DROP FUNCTION IF EXISTS lonnymq_unblock_channel_v1(text, text);
DROP FUNCTION IF EXISTS lonnymq_order_channel_v1(text, text, boolean);
DROP INDEX IF EXISTS lonnymq_channel_blocked_idx;
ALTER TABLE lonnymq_channel
    DROP CONSTRAINT lonnymq_channel_blocked_is_held,
    DROP CONSTRAINT lonnymq_channel_hold_range,
    DROP CONSTRAINT lonnymq_channel_ordered_one_at_a_time,
    DROP COLUMN blocked_by,
    DROP COLUMN hold_until,
    DROP COLUMN ordered;
