# Batch jobs on Kubernetes: a jupyter_server_config.py fragment (see README.md here).
#
# The server reaches the cluster with its kubeconfig, or in-cluster with its pod's service
# account when it runs in a pod (JupyterHub on Kubernetes): the service account needs the
# Role in rbac.yaml. Each offloaded job becomes a batch/v1 Job in `k8s_namespace`, running
# `k8s_image`, which must have Python, ipykernel and jupyter_costguard installed (Dockerfile).
c = get_config()  # noqa: F821 - provided by Jupyter when it loads this file

c.CostGuard.k8s_namespace = "ml-jobs"
c.CostGuard.k8s_image = "registry.example.com/ml/costguard-job:2024.05"
c.CostGuard.k8s_image_pull_secrets = ["regcred"]
c.CostGuard.k8s_service_account = "costguard-job"  # what the job's pod runs as
c.CostGuard.k8s_node_selector = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
c.CostGuard.k8s_tolerations = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
]
# Pods do not see the notebook's directory: data comes from the image, object storage, or
# a volume mounted here (raw Kubernetes Volume / VolumeMount objects).
c.CostGuard.k8s_volumes = [
    {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
]
c.CostGuard.k8s_volume_mounts = [{"name": "datasets", "mountPath": "/data", "readOnly": True}]
# Object storage both the server and the pods reach (any fsspec URL): inputs too big for a
# ConfigMap (~1 MiB), checkpoints that survive a pod, and outputs and results brought back.
c.CostGuard.k8s_storage_url = "s3://ml-scratch/costguard"
c.CostGuard.k8s_env_from = [{"secretRef": {"name": "s3-credentials"}}]
c.CostGuard.k8s_env = {"AWS_REGION": "eu-west-1"}
c.CostGuard.k8s_labels = {"team": "vision"}
c.CostGuard.k8s_ttl_seconds_after_finished = 3600  # None keeps finished Jobs
