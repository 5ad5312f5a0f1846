-- django-lonnymq 0028, reversed (after the reverse has reinstalled lonnymq_queue_stats_v2 as
-- the migrations before left it): drops the prune function, the configured test, the pruned
-- releases (a queue's released_total falls by them) and the channel index of messages.
DROP FUNCTION IF EXISTS lonnymq_prune_channels_v1(bigint, integer);
DROP FUNCTION IF EXISTS lonnymq_channel_configured_v1(lonnymq_channel);
DROP TABLE IF EXISTS lonnymq_queue_released;
DROP INDEX IF EXISTS lonnymq_message_channel_idx;
