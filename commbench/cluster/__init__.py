"""Cluster acceptance (issue 19, `commbench hunt` and `p2p`): how nodes are paired and how suspects are named for
Slurm. These are its first building blocks; the commands that use them come with the issue."""
