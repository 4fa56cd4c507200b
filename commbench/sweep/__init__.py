"""The collective sweep: what it runs (spec), how each point is measured and checked on the ranks
(collective_point), whether it fits in memory before launch (memory_plan), and its terminal tables (table)."""
