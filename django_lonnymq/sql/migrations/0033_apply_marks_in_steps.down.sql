-- django-lonnymq 0033, reversed: nothing more (the reverse has reinstalled
-- lonnymq_apply_marks_v1 as the migrations before left it).
SELECT 1;
