"""Suites: TOML files that list benches (collective sweeps, ddp, fsdp, zero) run into one run folder."""
