-- django-lonnymq 0006, reversed (after the reverse has reinstalled every function as the
-- migration before it left it): drops 0006's new functions and constraints.
DROP FUNCTION IF EXISTS lonnymq_configure_channel_v2(text, text, integer, boolean, bigint, boolean);
DROP FUNCTION IF EXISTS lonnymq_check_list_v1(text, integer);
DROP FUNCTION IF EXISTS lonnymq_check_range_v1(text, bigint, bigint, bigint, boolean);
ALTER TABLE lonnymq_message DROP CONSTRAINT IF EXISTS lonnymq_message_dequeue_at_range;
ALTER TABLE lonnymq_channel
    DROP CONSTRAINT IF EXISTS lonnymq_channel_release_interval_range,
    DROP CONSTRAINT IF EXISTS lonnymq_channel_name_not_blank,
    DROP CONSTRAINT IF EXISTS lonnymq_channel_queue_not_blank,
    ADD CONSTRAINT lonnymq_channel_release_interval_nonnegative CHECK (release_interval_ms >= 0);
