-- django-lonnymq 0026, reversed: drops the plans (the channels keep the limits they have).
DROP FUNCTION IF EXISTS lonnymq_check_limits_v1();
DROP FUNCTION IF EXISTS lonnymq_configure_channel_v4(text, text, integer, boolean, bigint, boolean, integer, integer,
                                                     bigint, integer, boolean, text, boolean, text[]);
DROP FUNCTION IF EXISTS lonnymq_set_default_plan_v1(text, text);
DROP FUNCTION IF EXISTS lonnymq_delete_plan_v1(text);
DROP FUNCTION IF EXISTS lonnymq_configure_plan_v1(text, integer, integer, boolean, bigint, integer, bigint, integer,
                                                  boolean);
DROP TRIGGER IF EXISTS lonnymq_channel_plan ON lonnymq_channel;
DROP FUNCTION IF EXISTS lonnymq_channel_plan_v1();
DROP FUNCTION IF EXISTS lonnymq_check_plan_name_v1(text);
DROP FUNCTION IF EXISTS lonnymq_raise_unknown_plan_v1(text);
DROP INDEX IF EXISTS lonnymq_channel_plan_idx;
ALTER TABLE lonnymq_channel
    DROP COLUMN IF EXISTS plan_id,
    DROP COLUMN IF EXISTS own_weight,
    DROP COLUMN IF EXISTS own_max_concurrency,
    DROP COLUMN IF EXISTS own_release_interval,
    DROP COLUMN IF EXISTS own_rate;
DROP TABLE IF EXISTS lonnymq_queue_plan;
DROP TABLE IF EXISTS lonnymq_plan;
