"""The row schema: every column of every file commbench writes under results/<run-id>/, declared once (name, unit,
dtype, meaning) in the module of its bench kind (columns several kinds share in common.py, the GPU's in gpu.py).

The kinds' column tuples (results, required, samples, keys) are derived from the declarations; the store reads the
dtypes from them, and docs/columns.md is generated from them (reference.py). Pure Python: the `--help` path imports
it."""
