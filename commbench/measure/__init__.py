"""Measurement primitives every bench kind shares: the timers (timing), sample statistics (stats) and nccl-tests'
bandwidths (bandwidth)."""
