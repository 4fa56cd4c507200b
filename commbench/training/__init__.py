"""Training benches: synthetic models, parallelism wrappers, model-state accounting."""
