"""commbench: collective-communication benchmarks and profiling for PyTorch distributed training."""

__version__ = "0.1.0"
