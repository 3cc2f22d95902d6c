"""The Kubernetes backend's options (`c.CostGuard.k8s_*`); defaults are `KubernetesSettings`'."""

from __future__ import annotations

from traitlets import Bool, Dict, Float, HasTraits, Int, List, Unicode

from jupyter_costguard.offload.backends.base import Backend
from jupyter_costguard.offload.backends.kubernetes.manifest import KubernetesSettings

_K = KubernetesSettings()


class KubernetesTraits(HasTraits):
    """Mixed into the server extension; `kubernetes_settings()` is what the backend gets."""

    k8s_enabled = Bool(
        None, allow_none=True, config=True,
        help="Offer the Kubernetes backend (jobs with backend 'kubernetes'). None: when "
        "k8s_image is set.")
    k8s_namespace = Unicode(_K.namespace, config=True, help="Namespace jobs are created in.")
    k8s_image = Unicode(_K.image, allow_none=True, config=True,
        help="Container image for jobs: Python with ipykernel, jupyter_costguard and what the "
        "notebook imports (the notebook's own environment is not in the pod).")
    k8s_image_pull_policy = Unicode(_K.image_pull_policy, allow_none=True, config=True,
                                    help="imagePullPolicy (None: the cluster's default).")
    k8s_image_pull_secrets = List(Unicode(), config=True, help="imagePullSecrets names.")
    k8s_service_account = Unicode(_K.service_account, allow_none=True, config=True,
                                  help="Service account of the job's pod.")
    k8s_node_selector = Dict(config=True, help="nodeSelector of the job's pod.")
    k8s_tolerations = List(Dict(), config=True, help="Tolerations (raw V1Toleration dicts).")
    k8s_volumes = List(Dict(), config=True,
                       help="Extra volumes (raw V1Volume dicts): how a job reaches its data.")
    k8s_volume_mounts = List(Dict(), config=True, help="Mounts of k8s_volumes (V1VolumeMount).")
    k8s_env = Dict(config=True, help="Extra environment variables of the job's container.")
    k8s_env_from = List(Dict(), config=True,
                        help="envFrom sources (raw dicts), e.g. a Secret with storage keys.")
    k8s_labels = Dict(config=True, help="Extra labels of the Job and its pod.")
    k8s_annotations = Dict(config=True, help="Extra annotations of the Job and its pod.")
    k8s_priority_class = Unicode(_K.priority_class, allow_none=True, config=True,
                                 help="priorityClassName of the job's pod.")
    k8s_gpu_resource = Unicode(_K.gpu_resource, config=True,
                               help="The extended resource GPUs are requested as.")
    k8s_ttl_seconds_after_finished = Int(_K.ttl_seconds_after_finished, allow_none=True,
        config=True,
        help="Finished Jobs are deleted after this (None: kept).")
    k8s_storage_url = Unicode(_K.storage_url, allow_none=True, config=True,
        help="fsspec URL the server and pods share: big inputs, checkpoints, outputs and "
        "results (without it a job's outputs and results stay in its pod).")
    k8s_python = Unicode(_K.python, config=True, help="Python in the image.")
    k8s_kubeconfig = Unicode(None, allow_none=True, config=True,
                             help="kubeconfig file (None: the default, or in-cluster config).")
    k8s_context = Unicode(None, allow_none=True, config=True, help="kubeconfig context.")
    k8s_in_cluster = Bool(None, allow_none=True, config=True,
                          help="Use the pod's service account (None: when in a pod).")
    k8s_sync_interval = Float(2.0, config=True,
                              help="Seconds between reads of a running job's state and log.")

    def kubernetes_settings(self) -> KubernetesSettings:
        return KubernetesSettings(
            namespace=self.k8s_namespace, image=self.k8s_image,
            image_pull_policy=self.k8s_image_pull_policy,
            image_pull_secrets=tuple(self.k8s_image_pull_secrets),
            service_account=self.k8s_service_account, node_selector=dict(self.k8s_node_selector),
            tolerations=tuple(self.k8s_tolerations), volumes=tuple(self.k8s_volumes),
            volume_mounts=tuple(self.k8s_volume_mounts), env=dict(self.k8s_env),
            env_from=tuple(self.k8s_env_from), labels=dict(self.k8s_labels),
            annotations=dict(self.k8s_annotations), priority_class=self.k8s_priority_class,
            gpu_resource=self.k8s_gpu_resource,
            ttl_seconds_after_finished=self.k8s_ttl_seconds_after_finished,
            storage_url=self.k8s_storage_url, python=self.k8s_python)

    def kubernetes_backend(self) -> Backend | None:
        """The backend when it is offered: `k8s_enabled`, or an image configured."""
        if not (self.k8s_enabled or (self.k8s_enabled is None and self.k8s_image)):
            return None
        # imported here: the kubernetes client is an optional dependency
        from jupyter_costguard.offload.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(self.kubernetes_settings(), kubeconfig=self.k8s_kubeconfig,
                                 context=self.k8s_context, in_cluster=self.k8s_in_cluster,
                                 sync_interval=self.k8s_sync_interval)
