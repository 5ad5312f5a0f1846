-- django-lonnymq 0040, reversed (after the five functions are reinstalled as the migrations
-- before left them): the stripe functions go.
DROP FUNCTION IF EXISTS lonnymq_lock_channels_v1(bigint[]);
DROP FUNCTION IF EXISTS lonnymq_stripe_key_v1(bigint);
DROP FUNCTION IF EXISTS lonnymq_stripe_lock_ns_v1();
