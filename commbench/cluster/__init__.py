"""Cluster acceptance (`commbench hunt`, `commbench p2p`): which node each rank is on, how nodes and ranks are paired
round by round, the timed transfers inside each pair's process group, and the diagnosis that names a slow node or a
bad link. Only exchange.py and gpu_health.py touch torch or NVML; the rest is plain Python, testable alone."""
