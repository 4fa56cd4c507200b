"""Training benches (groundwork for issue 6): synthetic models, parallelism wrappers, model-state accounting."""
