-- django-lonnymq 0032, reversed: drops the functions it added (lonnymq_workflow_ack_v1 was
-- left as it was) and gives the step table its default fillfactor back.
DROP FUNCTION IF EXISTS lonnymq_workflow_ack_v2(bigint[], uuid[], jsonb[], bigint);
DROP FUNCTION IF EXISTS lonnymq_workflow_release_v2(bigint[], bigint);
ALTER TABLE lonnymq_workflow_step RESET (fillfactor);
