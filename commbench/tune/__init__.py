"""`commbench tune`: which NCCL algorithm and protocol to force where, from runs measured under several environment
combinations (rows keyed by `env`, commbench/sweep/env_axes.py), written as the CSV NVIDIA's example tuner plugin
reads (NCCL_TUNER_CONFIG_FILE).

The steps, one module each: runs.py reads the runs and their topology; decisions.py picks the fastest combination per
size and whether it wins beyond noise; crossovers.py fits each combination's α–β line and where two lines cross;
plugin.py knows the plugin's names and how a winning combination becomes its line; verdicts.py says whether a size
earns a line at all; ranges.py turns the per-size choices into non-overlapping byte ranges; analysis.py runs those
steps; config_file.py writes the CSV; report.py prints the table and the --json document. Nothing here loads torch;
the CLI imports this package only when `commbench tune` runs (it loads pandas and numpy).
"""
