-- django-lonnymq 0018, reversed (after the reverse has reinstalled every function as the
-- migration before it left it): drops 0008's new functions, table and column.
DROP FUNCTION IF EXISTS lonnymq_configure_queue_v1(text, integer, boolean, integer, bigint, integer, boolean);
DROP FUNCTION IF EXISTS lonnymq_give_back_queue_slots_v1(bigint[]);
DROP TABLE IF EXISTS lonnymq_queue_config;
ALTER TABLE lonnymq_message
    DROP CONSTRAINT IF EXISTS lonnymq_message_queue_slot_needs_lease,
    DROP COLUMN IF EXISTS queue_slot;
