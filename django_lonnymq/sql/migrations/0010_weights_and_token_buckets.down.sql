-- django-lonnymq 0010, reversed (after the reverse has reinstalled every function as the
-- migration before it left it): drops 0007's new function and columns.
DROP FUNCTION IF EXISTS lonnymq_configure_channel_v3(text, text, integer, boolean, bigint, boolean, integer,
                                                     integer, bigint, integer, boolean);
ALTER TABLE lonnymq_channel
    DROP COLUMN IF EXISTS weight,
    DROP COLUMN IF EXISTS round_used,
    DROP COLUMN IF EXISTS rate_count,
    DROP COLUMN IF EXISTS rate_period_ms,
    DROP COLUMN IF EXISTS rate_burst,
    DROP COLUMN IF EXISTS bucket_level,
    DROP COLUMN IF EXISTS next_token_at;
