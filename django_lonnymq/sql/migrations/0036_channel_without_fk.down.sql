-- django-lonnymq 0036, reversed (after the reverse has reinstalled the twelve functions as
-- the migrations before left them): the foreign key and its index come back, the hold goes.
-- Adding the key fails if a message's channel is missing (lonnymq_check_v2 names them).
DROP FUNCTION IF EXISTS lonnymq_hold_channels_v1(bigint[]);
CREATE INDEX lonnymq_message_channel_idx ON lonnymq_message (channel_id);
ALTER TABLE lonnymq_message ADD CONSTRAINT lonnymq_message_channel_id_fkey
    FOREIGN KEY (channel_id) REFERENCES lonnymq_channel (id);
