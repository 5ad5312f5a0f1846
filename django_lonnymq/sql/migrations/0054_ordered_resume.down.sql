-- django-lonnymq 0054, reversed (after run_now and emit_event are put back as the
-- migrations before left them): the function that lifts holds goes.
DROP FUNCTION IF EXISTS lonnymq_lift_holds_v1(bigint[]);
