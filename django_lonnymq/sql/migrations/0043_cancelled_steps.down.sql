-- django-lonnymq 0043, reversed (after the two functions are reinstalled as the migrations
-- before left them): api.cancel's function goes.
DROP FUNCTION IF EXISTS lonnymq_cancel_v3(bigint[], boolean);
