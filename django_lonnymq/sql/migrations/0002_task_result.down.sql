DROP TABLE IF EXISTS lonnymq_task_result;
