-- django-lonnymq 0038, reversed (after the six functions are reinstalled as the migrations
-- before left them): lonnymq_ack_v1's last definition before 0038 is 0018's, and 0020 gave it
-- its generic plans with an ALTER FUNCTION, which the reinstalled body does not carry.
ALTER FUNCTION lonnymq_ack_v1(bigint[], uuid[]) SET plan_cache_mode = force_generic_plan;
