-- django-lonnymq 0037, reversed (after the reverse has reinstalled lonnymq_workflow_ack_v2,
-- lonnymq_workflow_release_v2 and lonnymq_workflow_check_v1 as 0034 and 0036 left them): the
-- triggers go, the index and the foreign key come back. Adding the key fails if a step's
-- workflow is missing (lonnymq_workflow_check_v1 names them as 'workflow_step_orphaned').
DROP TRIGGER lonnymq_workflow_deleted ON lonnymq_workflow;
DROP TRIGGER lonnymq_workflow_truncated ON lonnymq_workflow;
DROP FUNCTION lonnymq_workflow_deleted_v1();
CREATE INDEX lonnymq_workflow_step_workflow_idx ON lonnymq_workflow_step (workflow_id, id);
ALTER TABLE lonnymq_workflow_step ADD CONSTRAINT lonnymq_workflow_step_workflow_id_fkey
    FOREIGN KEY (workflow_id) REFERENCES lonnymq_workflow (id) ON DELETE CASCADE;
