-- django-lonnymq 0034, reversed (after the reverse has reinstalled lonnymq_workflow_start_v1,
-- lonnymq_workflow_ack_v2 and lonnymq_workflow_check_v1 as the migrations before left them):
-- the inputs function dropped, the edge table again, filled from the steps' parents, and the steps without their arrays.
DROP FUNCTION IF EXISTS lonnymq_workflow_inputs_v1(bigint[]);
DROP VIEW lonnymq_workflow_edge;
CREATE TABLE lonnymq_workflow_edge (
    parent_id  bigint NOT NULL REFERENCES lonnymq_workflow_step (id) ON DELETE CASCADE,
    child_id   bigint NOT NULL REFERENCES lonnymq_workflow_step (id) ON DELETE CASCADE,
    PRIMARY KEY (parent_id, child_id),
    CONSTRAINT lonnymq_workflow_edge_acyclic CHECK (parent_id < child_id)
);
CREATE INDEX lonnymq_workflow_edge_child_idx ON lonnymq_workflow_edge (child_id);
INSERT INTO lonnymq_workflow_edge (parent_id, child_id)
SELECT e.parent_id, s.id FROM lonnymq_workflow_step s CROSS JOIN LATERAL pg_catalog.unnest(s.parents) AS e(parent_id);
ALTER TABLE lonnymq_workflow_step
    DROP CONSTRAINT lonnymq_workflow_step_parents_before,
    DROP CONSTRAINT lonnymq_workflow_step_children_after,
    DROP COLUMN parents,
    DROP COLUMN children;
