"""Analytic models: model-state memory (ZeRO), communication volume per step, α–β fits. The single source of
predictions for the training sweeps and the report."""
