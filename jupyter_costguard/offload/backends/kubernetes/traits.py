"""The Kubernetes backend's options (`c.KubernetesBackend.<name>`); defaults are
`KubernetesSettings`'."""

from __future__ import annotations

from typing import ClassVar

from traitlets import Bool, Dict, Float, Int, List, Unicode
from traitlets.config import Configurable

from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.backends.kubernetes.manifest import KubernetesSettings

_K = KubernetesSettings()


class KubernetesBackend(Configurable):
    """Created by the server extension (parent=); `backend()` is what the job service gets."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "k8s_enabled": "enabled",
        "k8s_namespace": "namespace",
        "k8s_image": "image",
        "k8s_image_pull_policy": "image_pull_policy",
        "k8s_image_pull_secrets": "image_pull_secrets",
        "k8s_service_account": "service_account",
        "k8s_node_selector": "node_selector",
        "k8s_tolerations": "tolerations",
        "k8s_volumes": "volumes",
        "k8s_volume_mounts": "volume_mounts",
        "k8s_env": "env",
        "k8s_env_from": "env_from",
        "k8s_labels": "labels",
        "k8s_annotations": "annotations",
        "k8s_priority_class": "priority_class",
        "k8s_gpu_resource": "gpu_resource",
        "k8s_ttl_seconds_after_finished": "ttl_seconds_after_finished",
        "k8s_storage_url": "storage_url",
        "k8s_python": "python",
        "k8s_kubeconfig": "kubeconfig",
        "k8s_context": "context",
        "k8s_in_cluster": "in_cluster",
        "k8s_sync_interval": "sync_interval",
    }

    enabled = Bool(
        None, allow_none=True, config=True,
        help="Offer the Kubernetes backend (jobs with backend 'kubernetes'). None: when "
        "image is set.")
    namespace = Unicode(_K.namespace, config=True, help="Namespace jobs are created in.")
    image = Unicode(_K.image, allow_none=True, config=True,
        help="Container image for jobs: Python with ipykernel, jupyter_costguard and what the "
        "notebook imports (the notebook's own environment is not in the pod).")
    image_pull_policy = Unicode(_K.image_pull_policy, allow_none=True, config=True,
                                    help="imagePullPolicy (None: the cluster's default).")
    image_pull_secrets = List(Unicode(), config=True, help="imagePullSecrets names.")
    service_account = Unicode(_K.service_account, allow_none=True, config=True,
                                  help="Service account of the job's pod.")
    node_selector = Dict(config=True, help="nodeSelector of the job's pod.")
    tolerations = List(Dict(), config=True, help="Tolerations (raw V1Toleration dicts).")
    volumes = List(Dict(), config=True,
                       help="Extra volumes (raw V1Volume dicts): how a job reaches its data.")
    volume_mounts = List(Dict(), config=True, help="Mounts of volumes (V1VolumeMount).")
    env = Dict(config=True, help="Extra environment variables of the job's container.")
    env_from = List(Dict(), config=True,
                        help="envFrom sources (raw dicts), e.g. a Secret with storage keys.")
    labels = Dict(config=True, help="Extra labels of the Job and its pod.")
    annotations = Dict(config=True, help="Extra annotations of the Job and its pod.")
    priority_class = Unicode(_K.priority_class, allow_none=True, config=True,
                                 help="priorityClassName of the job's pod.")
    gpu_resource = Unicode(_K.gpu_resource, config=True,
                               help="The extended resource GPUs are requested as.")
    ttl_seconds_after_finished = Int(_K.ttl_seconds_after_finished, allow_none=True,
        config=True,
        help="Finished Jobs are deleted after this (None: kept).")
    storage_url = Unicode(_K.storage_url, allow_none=True, config=True,
        help="fsspec URL the server and pods share: big inputs, checkpoints, outputs and "
        "results (without it a job's outputs and results stay in its pod).")
    python = Unicode(_K.python, config=True, help="Python in the image.")
    kubeconfig = Unicode(None, allow_none=True, config=True,
                             help="kubeconfig file (None: the default, or in-cluster config).")
    context = Unicode(None, allow_none=True, config=True, help="kubeconfig context.")
    in_cluster = Bool(None, allow_none=True, config=True,
                          help="Use the pod's service account (None: when in a pod).")
    sync_interval = Float(2.0, config=True,
                              help="Seconds between reads of a running job's state and log.")

    def settings(self) -> KubernetesSettings:
        return KubernetesSettings(
            namespace=self.namespace, image=self.image,
            image_pull_policy=self.image_pull_policy,
            image_pull_secrets=tuple(self.image_pull_secrets),
            service_account=self.service_account, node_selector=dict(self.node_selector),
            tolerations=tuple(self.tolerations), volumes=tuple(self.volumes),
            volume_mounts=tuple(self.volume_mounts), env=dict(self.env),
            env_from=tuple(self.env_from), labels=dict(self.labels),
            annotations=dict(self.annotations), priority_class=self.priority_class,
            gpu_resource=self.gpu_resource,
            ttl_seconds_after_finished=self.ttl_seconds_after_finished,
            storage_url=self.storage_url, python=self.python)

    def backend(self) -> Backend | None:
        """The backend when it is offered: `enabled`, or an image configured."""
        if not (self.enabled or (self.enabled is None and self.image)):
            return None
        # imported here: the kubernetes client is an optional dependency
        from jupyter_costguard.offload.backends.kubernetes.backend import KubernetesExecutor

        return KubernetesExecutor(self.settings(), kubeconfig=self.kubeconfig,
                                 context=self.context, in_cluster=self.in_cluster,
                                 sync_interval=self.sync_interval)
