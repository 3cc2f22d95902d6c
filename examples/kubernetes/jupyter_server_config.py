# Batch jobs on Kubernetes: a jupyter_server_config.py fragment (see README.md here).
#
# The server reaches the cluster with its kubeconfig, or in-cluster with its pod's service
# account when it runs in a pod (JupyterHub on Kubernetes): the service account needs the
# Role in rbac.yaml. Each offloaded job becomes a batch/v1 Job in
# `c.KubernetesBackend.namespace`, running `c.KubernetesBackend.image`, which must have
# Python, ipykernel and jupyter_costguard installed (Dockerfile).
c = get_config()  # noqa: F821 - provided by Jupyter when it loads this file

c.KubernetesBackend.namespace = "ml-jobs"
c.KubernetesBackend.image = "registry.example.com/ml/costguard-job:2024.05"
c.KubernetesBackend.image_pull_secrets = ["regcred"]
c.KubernetesBackend.service_account = "costguard-job"  # what the job's pod runs as
c.KubernetesBackend.node_selector = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
c.KubernetesBackend.tolerations = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]
# Pods do not see the notebook's directory: data comes from the image, object storage, or
# a volume mounted here (raw Kubernetes Volume / VolumeMount objects).
c.KubernetesBackend.volumes = [
    {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
]
c.KubernetesBackend.volume_mounts = [{"name": "datasets", "mountPath": "/data", "readOnly": True}]
# Object storage both the server and the pods reach (any fsspec URL): inputs too big for a
# ConfigMap (~1 MiB), checkpoints that survive a pod, and outputs and results brought back.
c.KubernetesBackend.storage_url = "s3://ml-scratch/costguard"
c.KubernetesBackend.env_from = [{"secretRef": {"name": "s3-credentials"}}]
c.KubernetesBackend.env = {"AWS_REGION": "eu-west-1"}
c.KubernetesBackend.labels = {"team": "vision"}
c.KubernetesBackend.ttl_seconds_after_finished = 3600  # None keeps finished Jobs
