-- django-lonnymq 0030, reversed: drops the functions it added (the v1 functions were left
-- as they were).
DROP FUNCTION IF EXISTS lonnymq_check_limits_v2();
DROP FUNCTION IF EXISTS lonnymq_check_v2(bigint);
