"""What the batch-job writers share (commbench/slurm/ and commbench/k8s/): the checks of the free-text values that a
job script or manifest carries."""
