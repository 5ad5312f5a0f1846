-- django-lonnymq 0009, reversed: drops everything 0009_topics.up.sql created.
DROP FUNCTION IF EXISTS lonnymq_subscribe_v1(text[], text[]);
DROP FUNCTION IF EXISTS lonnymq_publish_v1(text, text[], jsonb[], bigint[], text[], integer, bigint, bigint);
DROP FUNCTION IF EXISTS lonnymq_check_topic_v1(text);
DROP TABLE IF EXISTS lonnymq_unrouted;
DROP TABLE IF EXISTS lonnymq_subscription;
