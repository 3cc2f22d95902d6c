"""Kubernetes backend: a batch/v1 Job and ConfigMap per offload."""
