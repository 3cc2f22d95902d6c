"""The Kubernetes backend, without a cluster (none can run here; no live-cluster test runs in CI).

Manifests are held to the Kubernetes API schema that ships with the official client (its
models: a field they do not know would be dropped by the API server). Submit, status, logs
and cancel go through the official client to a loopback stand-in of the API server
(`tests/support/k8s_standin.py`) that checks what it receives; the tests play the cluster by editing
its objects. The pod side runs for real: the container's command, run on this machine on the
ConfigMap the stand-in received, runs the job runner in a real kernel.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.offload.backends.kubernetes import manifest
from jupyter_costguard.offload.backends.kubernetes.backend import KubernetesExecutor, unknown_fields
from jupyter_costguard.offload.backends.kubernetes.manifest import KubernetesSettings
from jupyter_costguard.offload.backends.kubernetes.status import derive, new_log_lines
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.jobdir import read_json, write_json
from jupyter_costguard.offload.spec import Job, JobSpec, Resources, SpecCell
from tests.support.k8s_standin import TOKEN, Failure, StandIn, nano_rfc3339, run_locally

kubernetes = pytest.importorskip("kubernetes")

IMAGE = "registry.example.com/ml/costguard-job:1.4"
GPU_FULL = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes " \
    "are available: 3 No preemption victims found for incoming pod."
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def schema_problems(kind: str, doc: Any) -> list[str]:
    """What the API server would refuse with strict field validation: fields the client's
    models do not know, and required fields left out."""
    try:
        return unknown_fields(doc, f"V1{kind}")
    except ValueError as e:  # the models refuse a required field that is None
        return [str(e)]


@pytest.fixture(autouse=True)
def no_leftover_pods(tmp_path: Path) -> Iterator[None]:
    """The pod commands run here must not outlive a test that failed half-way: SIGTERM
    (the runner shuts its kernel down), then SIGKILL."""
    yield
    mine = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if proc.name.isdigit() and b"jupyter_costguard.offload" in cmdline \
                and str(tmp_path).encode() in cmdline:
            mine.append(int(proc.name))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in mine:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        while mine and time.monotonic() < deadline and any(
                Path(f"/proc/{p}").exists() for p in mine):
            time.sleep(0.1)


@pytest.fixture
def standin() -> Iterator[StandIn]:
    s = StandIn(validate=schema_problems).start()
    yield s
    s.stop()


@pytest.fixture
def configuration(standin: StandIn) -> Any:
    cfg = kubernetes.client.Configuration(host=standin.url,
                                          api_key={"authorization": f"Bearer {TOKEN}"})
    return cfg


def settings(**kw: Any) -> KubernetesSettings:
    base: dict[str, Any] = {"namespace": "costguard", "image": IMAGE}
    base.update(kw)
    return KubernetesSettings(**base)


def make_job(tmp_path: Path, job_id: int = 7, retries: int = 1,
             resources: Resources | None = None, inputs: bytes | None = None,
             notebook: str = "team/exp 3/train model.ipynb",
             checkpoint_location: str | None = None) -> tuple[Job, Path]:
    """A job as the job service hands it to a backend, with the directory it prepared."""
    cells = (SpecCell("a", 0, False, "x = 6", "x = 6", ("x",), "defines x"),
             SpecCell("b", 1, True, "y = x * 7 + z\nprint('product', y)",
                      "y = x * 7 + z\nprint('product', y)", ("y",), ""))
    spec = JobSpec(notebook=notebook, cwd="/home/alice/team/exp 3", kernel_name="python3",
                   cells=cells, resources=resources or Resources(),
                   retries=retries, backend="kubernetes", send=("z",) if inputs else (),
                   bring_back=("y",), checkpoint_location=checkpoint_location)
    now = time.time()
    job = Job(id=job_id, spec=spec, state="queued", phase="queued", created=now,
              phase_times={"queued": now}, record={"submitted_by": "alice@example.com"})
    d = tmp_path / "jobs" / str(job_id)
    d.mkdir(parents=True)
    # as the launcher writes it: with the digest of the sent variables, without which the
    # runner refuses to unpickle them
    digest = {"inputs_sha256": hashlib.sha256(inputs).hexdigest()} if inputs else {}
    write_json(d / "spec.json", {"id": job_id, "spec": spec.to_json(),
                                 "checkpoint_dir": str(d / "checkpoints"),
                                 "environment": {"CUDA_VISIBLE_DEVICES": "GPU-server-0"},
                                 **digest})
    if inputs is not None:
        (d / "inputs.pkl").write_bytes(inputs)
    return job, d


def backend(configuration: Any, **kw: Any) -> KubernetesExecutor:
    return KubernetesExecutor(settings(**kw), configuration=configuration, sync_interval=0)


def follow(b: KubernetesExecutor, job: Job, d: Path, ref: str | None) -> dict[str, Any]:
    """What the job service's follower does each pass: sync, then read status.json."""
    job = Job(**{**job.__dict__, "backend_ref": ref})
    b.sync(job, d)
    return read_json(d / "status.json") or {}


def log_text(d: Path) -> str:
    try:
        return (d / "log.txt").read_text()
    except FileNotFoundError:
        return ""


# --- manifests -----------------------------------------------------------------------------------


FULL = dict(
    image_pull_policy="IfNotPresent", image_pull_secrets=["regcred"],
    service_account="costguard-jobs", node_selector={"nvidia.com/gpu.product": "A100-SXM4-80GB"},
    tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "datasets",
                                                       "readOnly": True}}],
    volume_mounts=[{"name": "data", "mountPath": "/data", "readOnly": True}],
    env={"HF_HOME": "/data/hf"}, env_from=[{"secretRef": {"name": "s3-credentials"}}],
    labels={"team": "vision"}, annotations={"owner": "ml-platform"},
    priority_class="batch-low", storage_url="s3://bucket/costguard",
)


def test_manifests_are_kubernetes_objects_the_client_schema_knows_field_by_field(tmp_path):
    job, d = make_job(tmp_path, resources=Resources(gpus=2, cpus=7.5, memory_gib=60,
                                                    time_limit_seconds=5400.5),
                      inputs=pickle.dumps({"z": 0}))
    s = settings(**FULL)
    name = manifest.job_name(job)
    pod_doc = manifest.pod_spec_doc(json.loads((d / "spec.json").read_text()), job, s, name)
    cm = manifest.configmap(job, s, name, pod_doc, (d / "inputs.pkl").read_bytes())
    body = manifest.job_manifest(job, s, name, {"CUDA_VISIBLE_DEVICES": "GPU-server-0",
                                                "HTTP_PROXY": "http://proxy:3128"})
    # every key survives a round trip through the client's models: none is unknown
    assert unknown_fields(body, "V1Job") == []
    assert unknown_fields(cm, "V1ConfigMap") == []
    # and the check does catch one
    typo = json.loads(json.dumps(body))
    typo["spec"]["template"]["spec"]["tolerations"][0]["tolerationSecond"] = 30
    typo["spec"]["backofLimit"] = 3
    assert sorted(unknown_fields(typo, "V1Job")) == [
        "spec.backofLimit", "spec.template.spec.tolerations[0].tolerationSecond"]

    assert _DNS_1123.match(name) and len(name) <= 63 and name.startswith("costguard-job-7-")
    meta = body["metadata"]
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "jupyter-costguard"
    assert meta["labels"]["costguard/job-id"] == "7" and meta["labels"]["team"] == "vision"
    for value in meta["labels"].values():
        assert _LABEL_VALUE.match(value) and len(value) <= 63, value
    assert meta["labels"]["costguard/notebook"].startswith("team-exp-3-train-model.ipynb-")
    assert meta["annotations"]["costguard/notebook"] == "team/exp 3/train model.ipynb"
    assert meta["annotations"]["costguard/user"] == "alice@example.com"
    spec = body["spec"]
    assert spec["backoffLimit"] == 1 and spec["activeDeadlineSeconds"] == 5401
    assert spec["ttlSecondsAfterFinished"] == 3600
    assert spec["podFailurePolicy"]["rules"][0] == {
        "action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert spec["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"] == [2]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    assert spec["template"]["metadata"]["labels"] == meta["labels"]
    (container,) = pod["containers"]
    assert container["image"] == IMAGE and container["workingDir"] == "/costguard/work"
    assert container["command"] == ["python", "-m",
                                    "jupyter_costguard.offload.backends.kubernetes.pod", "pod",
                                    "/costguard/job", "/costguard/work"]
    assert container["resources"] == {
        "requests": {"cpu": "7500m", "memory": "61440Mi"},
        "limits": {"memory": "61440Mi", "nvidia.com/gpu": "2"}}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert "CUDA_VISIBLE_DEVICES" not in env  # the device plugin picks the pod's GPUs
    assert env["HTTP_PROXY"] == "http://proxy:3128" and env["HF_HOME"] == "/data/hf"
    assert {m["mountPath"] for m in container["volumeMounts"]} == {
        "/costguard/job", "/costguard/work", "/data"}
    assert pod["volumes"][0] == {"name": "costguard-job", "configMap": {"name": name}}
    assert pod["serviceAccountName"] == "costguard-jobs"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]

    # the pod's spec.json: paths the pod has, one attempt per pod, checkpoints in storage
    assert cm["immutable"] is True and cm["metadata"]["labels"] == meta["labels"]
    copy = json.loads(cm["data"]["spec.json"])
    assert copy["spec"]["cwd"] == "/costguard/work" and copy["spec"]["retries"] == 0
    assert copy["environment"] == {}
    assert copy["checkpoint_dir"] == "s3://bucket/costguard/job-7/checkpoints"
    assert copy["kubernetes"]["outputs_url"] == f"s3://bucket/costguard/job-7/{name}/out"
    assert pickle.loads(base64.b64decode(cm["binaryData"]["inputs.pkl"])) == {"z": 0}


def test_no_time_limit_means_no_deadline_and_no_gpu_means_no_gpu_resource(tmp_path):
    job, d = make_job(tmp_path, retries=0, checkpoint_location="gs://b/ck")
    s = settings(ttl_seconds_after_finished=None)
    body = manifest.job_manifest(job, s, "costguard-job-7-abcdef")
    assert "activeDeadlineSeconds" not in body["spec"]  # however long it waits or runs
    assert "ttlSecondsAfterFinished" not in body["spec"]
    assert body["spec"]["backoffLimit"] == 0
    assert "resources" not in body["spec"]["template"]["spec"]["containers"][0]
    copy = manifest.pod_spec_doc(json.loads((d / "spec.json").read_text()), job, s, "n")
    assert copy["checkpoint_dir"] == "gs://b/ck"  # the job's own location wins
    copy = manifest.pod_spec_doc(json.loads((d / "spec.json").read_text()),
                                 make_job(tmp_path / "b")[0], s, "n")
    assert copy["checkpoint_dir"] == "/costguard/work/checkpoints"
    assert unknown_fields(body, "V1Job") == []


def test_label_values_are_kept_when_valid_and_hashed_when_not():
    assert manifest.label_value("alice") == "alice"
    long = manifest.label_value("a/" * 80 + "nb.ipynb")
    assert len(long) <= 63 and _LABEL_VALUE.match(long)
    assert manifest.label_value("ü") != manifest.label_value("ö")
    assert _LABEL_VALUE.match(manifest.label_value("--x--"))


# --- logs ----------------------------------------------------------------------------------------


def test_log_lines_are_read_once_across_overlapping_requests():
    t0 = 1714557600.0
    lines = [(t0 + 0.1, b"one\n"), (t0 + 0.1, b"one again, same stamp\n"),
             (t0 + 0.5, b"two\n"), (t0 + 1.0, b"three\n")]

    def body(upto: int) -> bytes:
        return b"".join(nano_rfc3339(t).encode() + b" " + text for t, text in lines[:upto])

    cursor: dict[str, Any] = {"key": None, "n": 0}
    assert new_log_lines(body(1), cursor) == b"one\n"
    # the next request overlaps (since_seconds has a margin): only what is new comes out
    assert new_log_lines(body(3), cursor) == b"one again, same stamp\ntwo\n"
    assert new_log_lines(body(4), cursor) == b"three\n"
    assert new_log_lines(body(4), cursor) == b""
    # "…00.5Z" sorts after "…00.123456789Z" although it is the shorter string
    assert nano_rfc3339(t0 + 1.0).endswith(":01Z")
    # a cut-off last line waits for the next request; a final line without newline does not
    cursor = {"key": None, "n": 0}
    cut = body(2) + nano_rfc3339(t0 + 0.5).encode() + b" tw"
    assert new_log_lines(cut, cursor, truncated=True) == b"one\none again, same stamp\n"
    assert new_log_lines(body(3) + nano_rfc3339(t0 + 2).encode() + b" end", cursor) == \
        b"two\nend"


# --- submit, follow, cancel through the client against the stand-in ---------------------------


def test_a_job_goes_from_waiting_for_a_gpu_to_succeeded(tmp_path, standin, configuration):
    job, d = make_job(tmp_path, resources=Resources(gpus=1, cpus=4, memory_gib=16),
                      inputs=pickle.dumps({"z": 0}))
    b = backend(configuration)
    ref = b.launch(job, d, {"CUDA_VISIBLE_DEVICES": "GPU-server-0"})
    assert ref is not None and ref.startswith("costguard-job-7-")

    posts = [(r.method, r.path) for r in standin.requests]
    assert posts == [
        ("POST", "/api/v1/namespaces/costguard/configmaps"),
        ("POST", "/apis/batch/v1/namespaces/costguard/jobs"),
        ("PATCH", f"/api/v1/namespaces/costguard/configmaps/{ref}")]
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in standin.requests)
    assert all(r.query.get("fieldValidation") == ["Strict"] for r in standin.requests[:2])
    created = standin.requests[1].body
    assert created["metadata"]["labels"]["costguard/job-id"] == "7"
    assert created["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "memory": "16384Mi", "nvidia.com/gpu": "1"}
    cm = standin.configmaps[ref]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == standin.jobs[ref]["metadata"]["uid"]
    assert "spec.json" in cm["data"] and "inputs.pkl" in cm["binaryData"]

    # the Job controller has not made a pod yet
    status = follow(b, job, d, ref)
    assert status["state"] == "queued" and status["phase"] == "queued"
    assert status["attempt"] == 0

    # no node has a free GPU: the reason is in the log, the status and describe()
    pod = standin.add_pod(ref, "a1")
    standin.unschedulable(pod, GPU_FULL)
    status = follow(b, job, d, ref)
    assert status["state"] == "queued" and status["phase"] == "queued"
    assert status["kubernetes"]["waiting"] == f"Unschedulable: {GPU_FULL}"
    assert f"waiting: Unschedulable: {GPU_FULL}" in log_text(d)
    follow(b, job, d, ref)
    assert log_text(d).count("waiting:") == 1  # said once, not every poll
    info = b.describe(job, d)
    assert info is not None and info["phase"] == "queued"
    assert info["waiting"] == f"Unschedulable: {GPU_FULL}"
    assert info["pods"][0]["waiting"] == f"Unschedulable: {GPU_FULL}"
    assert any(e["reason"] == "FailedScheduling" for e in info["events"])
    assert b.reconcile(job, d)

    # scheduled, pulling its image
    standin.schedule(pod, "gpu-node-7")
    standin.image_pull_backoff(pod, IMAGE)
    status = follow(b, job, d, ref)
    assert status["state"] == "running" and status["phase"] == "starting"
    assert status["kubernetes"]["waiting"].startswith("ImagePullBackOff: Back-off pulling")
    assert "attempt 1 of 2: pod costguard-job-7-" in log_text(d)
    assert "on node gpu-node-7" in log_text(d)

    # running: the pod's log reaches log.txt as it grows
    standin.run(pod)
    standin.log(pod, "[costguard 10:00:00] attempt 1 of 1: starting kernel\n")
    status = follow(b, job, d, ref)
    assert status["state"] == "running" and status["phase"] == "running"
    assert status["attempt"] == 1 and status["kubernetes"]["waiting"] is None
    standin.log(pod, "product 42\n")
    follow(b, job, d, ref)
    follow(b, job, d, ref)
    text = log_text(d)
    assert text.count("product 42\n") == 1 and text.count("starting kernel") == 1
    logs = standin.calls("GET", "/log")
    assert logs[0].query["timestamps"][0].lower() == "true"
    assert logs[0].query["container"] == ["runner"]
    assert "sinceSeconds" not in logs[0].query and "sinceSeconds" in logs[-1].query

    # done: the runner's final status (the termination message) says how it went
    standin.log(pod, "[costguard 10:00:03] job succeeded\n")
    standin.end(pod, 0, json.dumps({"state": "succeeded", "exit_reason": None,
                                    "phase_times": {"finishing": time.time()}}))
    standin.finish_job(ref, ok=True)
    status = follow(b, job, d, ref)
    assert status["state"] == "succeeded" and status["phase"] == "done"
    assert status["exit_reason"] is None and status["attempt"] == 1
    assert set(status["phase_times"]) == {"starting", "running", "finishing", "done"}
    assert status["attempts"][-1]["outcome"] == "succeeded"
    assert log_text(d).endswith("job succeeded\n")
    # finished: nothing more is asked of the API for it
    before = len(standin.requests)
    follow(b, job, d, ref)
    assert len(standin.requests) == before


def test_a_disrupted_pod_does_not_fail_the_job_or_use_a_retry(tmp_path, standin,
                                                               configuration):
    job, d = make_job(tmp_path, retries=0)
    b = backend(configuration)
    ref = b.launch(job, d)
    first = standin.add_pod(ref, "p1")
    standin.schedule(first)
    standin.run(first)
    standin.log(first, "epoch 1\n")
    assert follow(b, job, d, ref)["state"] == "running"
    standin.disrupt(first)  # preempted: exit 143 with DisruptionTarget
    status = follow(b, job, d, ref)
    assert status["state"] == "running" and status["phase"] == "starting"
    assert "was disrupted (PreemptionByScheduler" in log_text(d)
    assert "does not count against the job's retries" in log_text(d)
    second = standin.add_pod(ref, "p2")
    standin.schedule(second, "gpu-node-2")
    standin.run(second)
    standin.log(second, "epoch 2 (resumed)\n")
    status = follow(b, job, d, ref)
    assert status["state"] == "running" and status["attempt"] == 1
    standin.end(second, 0)
    standin.finish_job(ref, ok=True)
    status = follow(b, job, d, ref)
    assert status["state"] == "succeeded" and status["attempt"] == 1
    assert [a["outcome"] for a in status["attempts"]] == ["disrupted", "succeeded"]
    text = log_text(d)
    assert text.index("epoch 1") < text.index("epoch 2 (resumed)")


def test_a_failed_job_says_the_runners_reason_or_kubernetes(tmp_path, standin, configuration):
    job, d = make_job(tmp_path, retries=1, resources=Resources(time_limit_seconds=60))
    b = backend(configuration)
    ref = b.launch(job, d)
    for suffix in ("f1", "f2"):
        pod = standin.add_pod(ref, suffix)
        standin.schedule(pod)
        standin.run(pod)
        standin.end(pod, 1, json.dumps({"state": "failed",
                                        "exit_reason": "ZeroDivisionError: division by zero"}))
        status = follow(b, job, d, ref)
        assert status["state"] in ("running", "queued")
    assert log_text(d).count("failed: ZeroDivisionError: division by zero") == 2
    standin.finish_job(ref, ok=False, reason="BackoffLimitExceeded",
                       message="Job has reached the specified backoff limit")
    status = follow(b, job, d, ref)
    assert status["state"] == "failed" and status["attempt"] == 2
    assert status["exit_reason"] == "ZeroDivisionError: division by zero"

    # the deadline (the job's time limit) is Kubernetes' to enforce
    job, d = make_job(tmp_path / "2", job_id=8, resources=Resources(time_limit_seconds=60))
    ref = b.launch(job, d)
    pod = standin.add_pod(ref)
    standin.schedule(pod)
    standin.run(pod)
    standin.finish_job(ref, ok=False, reason="DeadlineExceeded",
                       message="Job was active longer than specified deadline")
    assert follow(b, job, d, ref)["exit_reason"] == "time limit of 60 s exceeded"

    # a pod Kubernetes stopped (deleted by hand, evicted without a DisruptionTarget): the
    # runner took its SIGTERM for a cancel, which is not what happened
    job, d = make_job(tmp_path / "2b", job_id=10, retries=0)
    ref = b.launch(job, d)
    pod = standin.add_pod(ref)
    standin.schedule(pod)
    standin.run(pod)
    standin.end(pod, 1, json.dumps({"state": "cancelled", "exit_reason": "cancelled by the user"}))
    standin.finish_job(ref, ok=False, reason="BackoffLimitExceeded")
    assert "stopped by Kubernetes" in follow(b, job, d, ref)["exit_reason"]

    # an image that lacks the package: Kubernetes' fallback message is the last log line
    job, d = make_job(tmp_path / "3", job_id=9, retries=0)
    ref = b.launch(job, d)
    pod = standin.add_pod(ref)
    standin.schedule(pod)
    standin.end(pod, 1, "/usr/bin/python: Error while finding module specification for "
                "'jupyter_costguard.offload.backends.kubernetes.pod' "
                "(ModuleNotFoundError: No module named "
                "'jupyter_costguard')")
    standin.finish_job(ref, ok=False, reason="BackoffLimitExceeded")
    reason = follow(b, job, d, ref)["exit_reason"]
    assert reason.startswith("exit code 1, ") and "No module named 'jupyter_costguard'" in reason


def test_refusals_end_the_job_with_the_reason(tmp_path, standin, configuration):
    # a quota on Jobs: the API server answers 403 at create; the ConfigMap is not left behind
    job, d = make_job(tmp_path)
    b = backend(configuration)
    standin.fail_next[("POST", "jobs")] = Failure(
        403, "Forbidden", 'jobs.batch "x" is forbidden: exceeded quota: team-quota, '
        "requested: count/jobs.batch=1, used: count/jobs.batch=20, limited: "
        "count/jobs.batch=20")
    assert b.launch(job, d) is None
    status = read_json(d / "status.json")
    assert status["state"] == "failed" and status["phase"] == "done"
    assert status["exit_reason"].startswith("quota exceeded: jobs.batch")
    assert "Kubernetes refused the job: quota exceeded" in log_text(d)
    assert standin.configmaps == {} and standin.jobs == {}
    assert not b.reconcile(job, d)

    # no image configured: nothing is sent
    job, d = make_job(tmp_path / "2")
    before = len(standin.requests)
    assert backend(configuration, image=None).launch(job, d) is None
    assert "c.KubernetesBackend.image" in read_json(d / "status.json")["exit_reason"]
    assert len(standin.requests) == before

    # a misspelt raw setting is caught before it is sent
    job, d = make_job(tmp_path / "3")
    b2 = backend(configuration, tolerations=[{"key": "gpu", "operater": "Exists"}])
    assert b2.launch(job, d) is None
    assert "tolerations[0].operater" in read_json(d / "status.json")["exit_reason"]

    # inputs too big for a ConfigMap and no object storage to carry them
    job, d = make_job(tmp_path / "4", inputs=os.urandom(2 << 20))
    assert b.launch(job, d) is None
    reason = read_json(d / "status.json")["exit_reason"]
    assert "a ConfigMap carries at most" in reason and "KubernetesBackend.storage_url" in reason


def test_a_pod_quota_keeps_the_job_waiting_and_says_so(tmp_path, standin, configuration):
    job, d = make_job(tmp_path, resources=Resources(gpus=4))
    b = backend(configuration)
    ref = b.launch(job, d)
    message = (f'Error creating: pods "{ref}-x" is forbidden: exceeded quota: gpu-quota, '
               "requested: requests.nvidia.com/gpu=4, used: requests.nvidia.com/gpu=4, "
               "limited: requests.nvidia.com/gpu=4")
    standin.job_event(ref, "FailedCreate", message)
    status = follow(b, job, d, ref)
    assert status["state"] == "queued"
    assert status["kubernetes"]["waiting"] == f"quota exceeded: {message}"
    assert "waiting: quota exceeded:" in log_text(d)
    assert standin.calls("GET", "/events")[-1].query["fieldSelector"] == [
        f"involvedObject.name={ref}"]


def test_big_inputs_travel_through_object_storage(tmp_path, standin, configuration):
    store = tmp_path / "store"
    data = pickle.dumps({"z": os.urandom(2 << 20)})
    job, d = make_job(tmp_path, inputs=data)
    b = backend(configuration, storage_url=f"file://{store}")
    ref = b.launch(job, d)
    assert ref is not None
    cm = standin.configmaps[ref]
    assert "binaryData" not in cm
    url = json.loads(cm["data"]["spec.json"])["kubernetes"]["inputs_url"]
    assert url == f"file://{store}/job-7/{ref}/inputs.pkl"
    assert (store / "job-7" / ref / "inputs.pkl").read_bytes() == data


def test_cancel_deletes_the_job_and_its_pods(tmp_path, standin, configuration):
    job, d = make_job(tmp_path)
    b = backend(configuration)
    ref = b.launch(job, d)
    pod = standin.add_pod(ref)
    standin.schedule(pod)
    standin.run(pod)
    job = Job(**{**job.__dict__, "backend_ref": ref})
    # an API that does not take it: the user hears so (503), nothing is pretended
    standin.fail_next[("DELETE", "jobs")] = Failure(500, "InternalError", "etcdserver: timeout")
    with pytest.raises(JobError) as refused:
        b.cancel(job, d)
    assert refused.value.status == 503 and "etcdserver: timeout" in str(refused.value)
    assert ref in standin.jobs
    b.cancel(job, d)
    delete = standin.calls("DELETE", f"/jobs/{ref}")[-1]
    assert delete.body["propagationPolicy"] == "Background"  # else the pods are orphaned
    assert standin.jobs == {} and standin.pods == {} and standin.configmaps == {}
    assert not b.reconcile(job, d)
    b.sync(job, d)  # a Job that is gone: the follower decides (cancelled, or lost)
    assert read_json(d / "status.json") is None
    b.cancel(job, d, force=True)  # again, forced: nothing left is no error
    forced = standin.calls("DELETE", "/api/v1/namespaces/costguard/pods")
    assert forced[-1].query["labelSelector"] == [f"job-name={ref}"]
    assert forced[-1].body["gracePeriodSeconds"] == 0


def test_an_api_that_does_not_answer_loses_no_job(tmp_path, standin, configuration):
    job, d = make_job(tmp_path)
    b = backend(configuration)
    ref = b.launch(job, d)
    job = Job(**{**job.__dict__, "backend_ref": ref})
    standin.stop()
    started = time.monotonic()
    assert b.reconcile(job, d)
    b.sync(job, d)  # logs a warning, raises nothing
    assert time.monotonic() - started < 30


def test_credentials_are_sent_and_a_wrong_token_is_refused(tmp_path, standin):
    cfg = kubernetes.client.Configuration(host=standin.url,
                                          api_key={"authorization": "Bearer wrong"})
    job, d = make_job(tmp_path)
    assert KubernetesExecutor(settings(), configuration=cfg).launch(job, d) is None
    assert "401" in read_json(d / "status.json")["exit_reason"]


def test_derive_is_quiet_about_a_job_the_controller_has_not_seen():
    job = Job(id=1, spec=JobSpec(notebook="n.ipynb", cwd="/", kernel_name="python3",
                                 cells=()), state="queued", phase="queued", created=0.0)
    status, lines = derive(job, {"metadata": {"name": "j"}, "status": {}}, [], [], {}, 10.0)
    assert status["state"] == "queued" and lines == [] and status["phase_times"] == {}


# --- the pod side, for real -----------------------------------------------------------------------


def test_the_pods_command_runs_the_job_and_leaves_its_results(tmp_path, standin,
                                                                 configuration):
    """The container's command, run here on the ConfigMap the stand-in received: the runner
    runs the cells in a real kernel with the sent variable, the log streams to stdout (the
    pod log), results and outputs go to storage, the final status to the termination
    message; then the server side brings them back."""
    store = tmp_path / "store"
    job, d = make_job(tmp_path, inputs=pickle.dumps({"z": 100}))
    b = backend(configuration, storage_url=f"file://{store}", python=sys.executable,
                job_mount=str(tmp_path / "pod" / "job"), work_dir=str(tmp_path / "pod" / "work"))
    ref = b.launch(job, d)
    assert ref is not None
    pod = standin.add_pod(ref)
    run_locally(standin, pod, tmp_path / "termination-log")[0].join(120)
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["state"] == "succeeded", log_text(d) + str(standin.logs)
    status = follow(b, job, d, ref)
    assert status["state"] == "succeeded", status
    text = log_text(d)
    assert "product 142" in text and "job succeeded" in text
    outputs = json.loads((d / "outputs.json").read_text())
    assert outputs[0]["outputs"][0]["text"] == "product 142\n"
    with open(d / "results.pkl", "rb") as f:
        assert pickle.load(f) == {"y": 142}
    assert json.loads((d / "env.json").read_text())["packages"].get("ipykernel")


def test_sigterm_to_the_pod_reaches_the_runner(tmp_path, standin, configuration):
    """What a pod gets when its Job is deleted or it is preempted: the runner shuts its
    kernel down and says so; the pod's command exits with it."""
    job, d = make_job(tmp_path, inputs=pickle.dumps({"z": 0}))
    wait = "import time\nprint('started', flush=True)\ntime.sleep(120)"
    slow = SpecCell("s", 2, True, wait, wait, (), "")
    spec = JobSpec(**{**job.spec.__dict__, "cells": (*job.spec.cells, slow)})
    job = Job(**{**job.__dict__, "spec": spec})
    write_json(d / "spec.json", {"id": job.id, "spec": spec.to_json(),
                                 "checkpoint_dir": str(d / "checkpoints"), "environment": {},
                                 "inputs_sha256": hashlib.sha256(pickle.dumps({"z": 0})
                                                                 ).hexdigest()})
    b = backend(configuration, python=sys.executable, job_mount=str(tmp_path / "pod" / "job"),
                work_dir=str(tmp_path / "pod" / "work"))
    ref = b.launch(job, d)
    pod = standin.add_pod(ref)
    thread, proc = run_locally(standin, pod, tmp_path / "termination-log")
    deadline = time.monotonic() + 120
    while not any(b"started" in line for _, line in standin.logs.get(pod, [])):
        assert time.monotonic() < deadline and proc.poll() is None, standin.logs.get(pod)
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    thread.join(60)
    assert proc.returncode == 1
    message = json.loads((tmp_path / "termination-log").read_text())
    assert message["state"] == "cancelled"
    assert any(b"job cancelled" in line for _, line in standin.logs[pod])


def test_the_pods_command_refuses_a_missing_input(tmp_path):
    env = {**os.environ, "COSTGUARD_TERMINATION_LOG": str(tmp_path / "msg")}
    (tmp_path / "empty").mkdir()
    done = subprocess.run([sys.executable, "-m",
                           "jupyter_costguard.offload.backends.kubernetes.pod", "pod",
                           str(tmp_path / "empty"), str(tmp_path / "work")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == manifest.EXIT_USAGE  # FailJob: retrying cannot help
    assert json.loads((tmp_path / "msg").read_text())["state"] == "failed"


# --- through the REST API of a real Jupyter server ------------------------------------------------


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"),
            "Offload.poll_interval": 0.1}


async def _wait(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.05)


async def test_jobs_api_runs_follows_and_cancels_kubernetes_jobs(
        jp_fetch, jp_serverapp, jp_root_dir, tmp_path, standin, configuration):
    from tests.support.jobs import full_log, job, submit, wait_job
    from tests.support.notebooks import code, write_notebook

    service = jp_serverapp.web_app.settings["costguard_jobs"]
    store = tmp_path / "store"
    b = backend(configuration, storage_url=f"file://{store}", python=sys.executable,
                job_mount=str(tmp_path / "pod" / "job"), work_dir=str(tmp_path / "pod" / "work"))
    service.backends["kubernetes"] = b
    write_notebook(jp_root_dir, "exp/train.ipynb", [
        code("a", "x = 6"), code("b", "y = x * 7\nprint('product', y)")])

    doc = await submit(jp_fetch, "exp/train.ipynb", ["b"], backend="kubernetes",
                       resources={"gpus": 1, "cpus": 2, "memory_gib": 8})
    await _wait(lambda: len(standin.jobs) == 1)
    obj = standin.only_job()
    name = obj["metadata"]["name"]
    assert obj["metadata"]["labels"]["costguard/job-id"] == str(doc["id"])
    assert obj["metadata"]["annotations"]["costguard/notebook"] == "exp/train.ipynb"
    assert name in standin.configmaps
    sent = json.loads(standin.configmaps[name]["data"]["spec.json"])
    assert sent["environment"] == {}  # not the server's GPU pick
    assert sent["spec"]["cwd"] == str(tmp_path / "pod" / "work")

    pod = standin.add_pod(name)
    standin.unschedulable(pod, GPU_FULL)
    waiting = await wait_job(jp_fetch, doc["id"], lambda d: "Insufficient nvidia.com/gpu"
                             in d["log_tail"], timeout=30)
    assert waiting["state"] == "queued"

    run_locally(standin, pod, tmp_path / "termination-log")
    done = await wait_job(jp_fetch, doc["id"], timeout=120)
    assert done["state"] == "succeeded", done
    assert done["attempts"] == 1 and done["exit_reason"] is None
    assert [p["phase"] for p in done["timeline"]] == ["queued", "starting", "running",
                                                      "finishing"]
    assert done["label"].startswith(f"ran as job {doc['id']} on kubernetes · ")
    assert done["record"]["attempts"][0]["pod"] == pod
    log = await full_log(jp_fetch, doc["id"])
    assert "product 42" in log and "waiting: Unschedulable" in log
    results = json.loads((await jp_fetch("costguard", "api", "jobs", str(doc["id"]),
                                         "results")).body)
    assert results["cells"][0]["outputs"][0]["text"] == "product 42\n"
    namespace: dict[str, Any] = {}
    exec(results["load_code"], namespace)
    assert namespace["y"] == 42

    # cancel: the Job is deleted with its pods, the job ends cancelled
    second = await submit(jp_fetch, "exp/train.ipynb", ["b"], backend="kubernetes")
    standin.jobs.pop(obj["metadata"]["name"])  # as ttlSecondsAfterFinished would, later
    await _wait(lambda: len(standin.jobs) == 1)
    name = standin.only_job()["metadata"]["name"]
    assert standin.only_job()["metadata"]["labels"]["costguard/job-id"] == str(second["id"])
    pod = standin.add_pod(name)
    standin.schedule(pod)
    standin.run(pod)
    await wait_job(jp_fetch, second["id"], lambda d: d["state"] == "running", timeout=30)
    resp = await jp_fetch("costguard", "api", "jobs", str(second["id"]), "cancel",
                          method="POST", body="")
    assert resp.code == 202
    ended = await wait_job(jp_fetch, second["id"], timeout=30)
    assert ended["state"] == "cancelled", ended
    (delete,) = standin.calls("DELETE", f"/jobs/{name}")
    assert delete.body["propagationPolicy"] == "Background"
    assert standin.jobs == {} and pod not in standin.pods and name not in standin.configmaps

    # a job Kubernetes refuses ends failed with the reason, not stuck queued
    b.settings = settings(image=None)
    third = await submit(jp_fetch, "exp/train.ipynb", ["b"], backend="kubernetes")
    failed = await wait_job(jp_fetch, third["id"], timeout=30)
    assert failed["state"] == "failed" and "KubernetesBackend.image" in failed["exit_reason"]
    assert (await job(jp_fetch, third["id"]))["state"] == "failed"


def test_a_termination_message_nested_too_deep_is_text_not_a_crash():
    """The message is what the job's code could write: 4 KB of '[' parses as nothing, and
    reads as the text it is (before, a RecursionError escaped the status reader)."""
    from jupyter_costguard.offload.backends.kubernetes.status import (
        _runner_reason,
        _termination_message,
    )

    pod = {"status": {"containerStatuses": [{"name": manifest.CONTAINER, "state": {"terminated": {
        "exitCode": 1, "message": "[" * 4000}}}]}}
    assert _termination_message(pod) == "[" * 4000
    assert _runner_reason(pod) is None
