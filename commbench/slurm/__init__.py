"""Slurm: render the batch script of a suite run, submit it, and follow the job."""
