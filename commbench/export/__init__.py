"""Stored runs in other tools' formats (`commbench export`): the Prometheus text exposition that node_exporter's
textfile collector reads, with NVIDIA NCCL Inspector's metric and label names where the Inspector has them.

exposition.py writes the text format, inspector.py holds the Inspector's spellings, sources.py finds the runs to
export, metrics.py turns their rows into metric families, prometheus.py joins them. Reading runs loads pandas; nothing
here loads torch."""
