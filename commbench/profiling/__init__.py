"""Profiling: torch.profiler capture, Kineto trace analysis (overlap, exposed communication, skew), NVML sampling."""
