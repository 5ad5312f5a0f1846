ALTER FUNCTION lonnymq_queue_stats_v3(text[], bigint) RESET enable_sort;
ALTER FUNCTION lonnymq_queue_stats_v3(text[], bigint) RESET enable_bitmapscan;
