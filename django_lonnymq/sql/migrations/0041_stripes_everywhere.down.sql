-- django-lonnymq 0041, reversed (after the seven functions are reinstalled as the migrations
-- before left them): the one-channel lock function goes.
DROP FUNCTION IF EXISTS lonnymq_lock_channel_v1(bigint);
