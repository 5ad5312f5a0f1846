-- django-lonnymq 0031, reversed: drops the functions it added (lonnymq_workflow_ack_v1 was
-- left as it was).
DROP FUNCTION IF EXISTS lonnymq_workflow_ack_v2(bigint[], uuid[], jsonb[], bigint);
DROP FUNCTION IF EXISTS lonnymq_workflow_release_v2(bigint[], bigint);
