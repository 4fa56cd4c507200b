"""`commbench k8s`: a suite as a Kubernetes job manifest, a Kubeflow Trainer TrainJob or a plain JobSet.

names.py checks what the API server would refuse (names, counts, the image) before anything is written; pod.py is
what every pod of either kind runs (torchrun around `commbench run`, the results and suite volumes); resources.py
what each pod asks of its node (GPUs, CPUs and memory, an RDMA device, IPC_LOCK, host networking), in Kubernetes
quantities (quantity.py); manifest.py
makes the TrainJob or JobSet document around it and writes the YAML stream. Plain data, no torch, no click.
"""
