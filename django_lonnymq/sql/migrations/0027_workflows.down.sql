-- django-lonnymq 0027, reversed: drops the workflow triggers, functions and tables.
DROP TRIGGER IF EXISTS lonnymq_workflow_step_requeued ON lonnymq_dead_message;
DROP TRIGGER IF EXISTS lonnymq_workflow_step_dead ON lonnymq_dead_message;
DROP FUNCTION IF EXISTS lonnymq_workflow_check_v1();
DROP FUNCTION IF EXISTS lonnymq_workflow_prune_v1(bigint, integer);
DROP FUNCTION IF EXISTS lonnymq_workflow_cancel_v1(bigint);
DROP FUNCTION IF EXISTS lonnymq_workflow_step_requeued_v1();
DROP FUNCTION IF EXISTS lonnymq_workflow_step_dead_v1();
DROP FUNCTION IF EXISTS lonnymq_workflow_ack_v1(bigint[], uuid[], jsonb[], bigint);
DROP FUNCTION IF EXISTS lonnymq_workflow_start_v1(text, text, text[], text[], text[], jsonb[], bigint[], integer[],
                                                  integer[], integer[], text, text, jsonb, integer, bigint);
DROP FUNCTION IF EXISTS lonnymq_workflow_release_v1(bigint[], bigint);
DROP TABLE IF EXISTS lonnymq_workflow_edge;
DROP TABLE IF EXISTS lonnymq_workflow_step;
DROP TABLE IF EXISTS lonnymq_workflow;
