-- django-lonnymq 0042, reversed (after lonnymq_workflow_ack_v2 is reinstalled as the
-- migrations before left it): the new functions and the column go.
DROP FUNCTION IF EXISTS lonnymq_workflow_inputs_v2(bigint[]);
DROP FUNCTION IF EXISTS lonnymq_inputs_too_large_v1(bigint);
DROP FUNCTION IF EXISTS lonnymq_workflow_inputs_bytes_v1(bigint[]);
ALTER TABLE lonnymq_workflow_step DROP COLUMN IF EXISTS output_bytes;
