"""The regression gate: two runs joined on their configuration keys, a verdict per row (compare), how it is shown
(compare_output), and the statistics across launches of run sets (run_set, launch_tests)."""
