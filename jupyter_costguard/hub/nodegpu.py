"""GPU activity of each user server's pod, read from the node: NVIDIA's dcgm-exporter series in
Prometheus, asked through Prometheus's HTTP API.

Why: a user controls their own server (its config, its process), so its report of GPU activity
is their word. dcgm-exporter runs on the node, outside the user's reach, and (with the kubelet's
pod-resources mapping) labels each GPU's series with the `namespace` and `pod` holding it. The
service asks Prometheus once per round for every pod it cares about and reads activity per GPU:

- `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (ratio 0..1 of time the graphics/compute engine was active,
  the profiling metric NVIDIA recommends), else, for a GPU without profiling metrics,
  `DCGM_FI_DEV_GPU_UTIL` (percent 0..100). Both in one query: the second fills in only the
  GPUs the first does not cover (PromQL `or on (namespace, pod, gpu)`).
- A GPU series without pod labels (a GPU no pod holds) is not asked for; a pod without series
  is absent from the answer: silence is for the caller's own rules to judge.
- Every failure (Prometheus down, an error answer, malformed JSON) is one `NodeGpuError` with
  a message that says what went wrong. A value that cannot be activity (NaN, negative, far
  over 100 %: DCGM's blank sentinels) is not trusted: the pod holds that GPU, its activity is
  *unknown* (`common/gpuactivity.py`, the rule the servers use too), and a pod with a GPU of
  unknown activity is never idle.

Pod names: `pod_name` expands KubeSpawner's `pod_name_template` as KubeSpawner 7 does, for the
servers whose pod name is not in the Hub's record (`pod_of_state` reads it from the spawner's
state where the service may see it).

Stdlib and tornado only.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from jupyter_costguard.common.gpuactivity import (
    BUSY,
    GPU_BUSY_PERCENT,
    UNKNOWN,
    Activity,
    gpu_activity,
)

#: the profiling metric: fraction of time the graphics/compute engine was active (0..1)
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
#: the older utilization metric (percent 0..100), for GPUs without profiling metrics
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
#: the label the query adds to say which metric answered for a GPU
SOURCE_LABEL = "costguard_source"
#: a value above this (percent) is not activity but garbage (DCGM's blank sentinels, a bad
#: scale); between 100 and this it is rounding and counts as 100
ABSURD_PERCENT = 105.0


class NodeGpuError(Exception):
    """Prometheus could not give the node's GPU activity; the message says why."""


@dataclass(frozen=True)
class PodGpu:
    """One pod's GPUs as dcgm-exporter saw them at `time`."""

    namespace: str
    pod: str
    #: activity per GPU in percent (0..100), in the order of the `gpu` label (GPU index);
    #: None where the series' value is not activity (NaN, a blank sentinel)
    activity: tuple[float | None, ...]
    #: the `gpu` label of each value in `activity`
    gpu_ids: tuple[str, ...]
    #: GPUs at or above the reader's `busy_percent`
    busy: int
    #: which series answered: ENGINE_ACTIVE or GPU_UTIL (both, comma-separated, if mixed)
    metric: str
    #: Prometheus's evaluation time of the answer (epoch seconds); Prometheus drops a series
    #: within one scrape once the exporter or the pod is gone, so the value is that recent
    time: float
    #: each GPU's busy / idle / unknown, by the one rule at the reader's `busy_percent`
    states: tuple[Activity, ...] = ()

    @property
    def unknown(self) -> int:
        """GPUs whose activity is unknown: held, maybe working, never idle."""
        return sum(1 for s in self.states if s == UNKNOWN)

    @property
    def gpus(self) -> int:
        return len(self.activity)

    @property
    def idle(self) -> bool:
        """Holds GPUs, none of them busy and none of unknown activity."""
        return self.gpus > 0 and self.busy == 0 and self.unknown == 0


# --- PromQL --------------------------------------------------------------------------------

_GO_REGEXP_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def regex_quote(value: str) -> str:
    """A literal for Prometheus's RE2 regex matchers, as Go's regexp.QuoteMeta writes it."""
    return "".join("\\" + c if c in _GO_REGEXP_SPECIAL else c for c in value)


def promql_string(value: str) -> str:
    """A double-quoted PromQL string literal holding `value` exactly (Go string escapes), so no
    label value can end the string or the selector it sits in."""
    out = ['"']
    for c in value:
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _matcher(label: str, values: Iterable[str]) -> str:
    """`label="v"` for one value, an anchored alternation `label=~"a|b"` for several."""
    ordered = sorted(set(values))
    if len(ordered) == 1:
        return f"{label}={promql_string(ordered[0])}"
    return f"{label}=~{promql_string('|'.join(regex_quote(v) for v in ordered))}"


def activity_query(pods: Iterable[tuple[str, str]], *, max_matcher_chars: int = 6000) -> str:
    """The one PromQL query for every asked pod's GPUs, in percent, labelled with the metric
    that answered. `max by (namespace, pod, gpu)` folds duplicates (two exporters, a restarted
    one, MIG instances of one GPU) into the busiest. When the pods' names would make the query
    longer than `max_matcher_chars`, it asks for every pod-held GPU in the namespaces instead
    (the caller's filter keeps only the asked pods)."""
    asked = {(ns, pod) for ns, pod in pods if ns and pod}
    if not asked:
        raise ValueError("no pods to ask for")
    selectors = [_matcher("namespace", (ns for ns, _ in asked)), 'pod!=""']
    pod_matcher = _matcher("pod", (pod for _, pod in asked))
    if len(pod_matcher) <= max_matcher_chars:
        selectors.append(pod_matcher)
    sel = "{" + ",".join(selectors) + "}"

    def labelled(expr: str, metric: str) -> str:
        return f'label_replace({expr}, "{SOURCE_LABEL}", "{metric}", "", "")'

    engine = labelled(f"100 * max by (namespace, pod, gpu) ({ENGINE_ACTIVE}{sel})",
                      ENGINE_ACTIVE)
    util = labelled(f"max by (namespace, pod, gpu) ({GPU_UTIL}{sel})", GPU_UTIL)
    return f"{engine} or on (namespace, pod, gpu) {util}"


# --- the reader ------------------------------------------------------------------------------


def _gpu_order(gpu: str) -> tuple[int, int | str]:
    return (0, int(gpu)) if gpu.isdigit() else (1, gpu)


@dataclass(repr=False)
class NodeGpu:
    """Reads pods' GPU activity from Prometheus (dcgm-exporter's series).

    `prometheus_url` is Prometheus's base URL, with its route prefix if it has one
    (`http://prometheus-server.monitoring/prometheus`); `headers` go with every request (an
    `Authorization` header for a Prometheus behind a proxy). `timeout` bounds each request,
    connecting included, and is passed to Prometheus as the query's own timeout.
    """

    prometheus_url: str
    timeout: float = 5.0
    #: a GPU at or above this activity (percent) is busy
    busy_percent: float = GPU_BUSY_PERCENT
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold a token
    #: beyond this length of the pod matcher, the query asks for all pod-held GPUs
    max_matcher_chars: int = 6000

    async def read(self, pods: Iterable[tuple[str, str]]) -> dict[tuple[str, str], PodGpu]:
        """Every asked (namespace, pod) that has GPU series, keyed by (namespace, pod); pods
        without series (and pairs with an empty name) are absent. Raises NodeGpuError when
        Prometheus cannot answer."""
        asked = {(ns, pod) for ns, pod in pods if ns and pod}
        if not asked:
            return {}
        query = activity_query(asked, max_matcher_chars=self.max_matcher_chars)
        answer = await self._query(query)
        return self._parse(answer, asked)

    def __repr__(self) -> str:  # neither credentials in the URL nor the headers
        return (f"NodeGpu({self._shown_url()!r}, timeout={self.timeout!r}, "
                f"busy_percent={self.busy_percent!r})")

    def _shown_url(self) -> str:
        """The URL for messages, without credentials written into it."""
        parts = urlsplit(self.prometheus_url.rstrip("/"))
        if parts.username is not None or parts.password is not None:
            parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        return urlunsplit(parts)

    def _where(self) -> str:
        return f"Prometheus at {self._shown_url()}"

    async def _query(self, query: str) -> Any:
        base = self.prometheus_url.rstrip("/")
        where = self._where()
        url = f"{base}/api/v1/query?" + urlencode(
            {"query": query, "timeout": f"{max(self.timeout, 0.001):g}s"})
        request = HTTPRequest(url, method="GET", headers={"Accept": "application/json",
                                                          **self.headers},
                              connect_timeout=self.timeout, request_timeout=self.timeout,
                              follow_redirects=False)
        client = AsyncHTTPClient(force_instance=True)
        try:
            try:
                response = await client.fetch(request, raise_error=False)
            except HTTPClientError as e:  # timeouts, closed streams
                raise NodeGpuError(f"{where}: no answer ({e})") from e
            except OSError as e:  # refused, unreachable, DNS, TLS
                raise NodeGpuError(f"{where}: cannot connect ({e})") from e
            except ValueError as e:  # not a URL tornado can fetch
                raise NodeGpuError(f"{where}: cannot ask ({e})") from e
        finally:
            client.close()
        body = response.body or b""
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if response.code != 200:
            detail = answer.get("error") if isinstance(answer, dict) else None
            detail = detail or body[:200].decode("utf-8", "replace") or response.reason
            raise NodeGpuError(f"{where}: HTTP {response.code} for the GPU query: {detail}")
        if not isinstance(answer, dict):
            raise NodeGpuError(f"{where}: the answer is not a JSON object "
                               f"({body[:100].decode('utf-8', 'replace')!r})")
        if answer.get("status") != "success":
            raise NodeGpuError(f"{where}: status {answer.get('status')!r}: "
                               f"{answer.get('errorType', '')} {answer.get('error', '')}".strip())
        return answer

    def _parse(self, answer: dict[str, Any],
               asked: set[tuple[str, str]]) -> dict[tuple[str, str], PodGpu]:
        where = self._where()
        data = answer.get("data")
        if not isinstance(data, dict) or data.get("resultType") != "vector" \
                or not isinstance(data.get("result"), list):
            raise NodeGpuError(f"{where}: expected an instant vector, got "
                               f"{json.dumps(data)[:200]}")
        #: (namespace, pod) -> gpu -> (percent or None: not activity, metric, time)
        found: dict[tuple[str, str], dict[str, tuple[float | None, str, float]]] = {}
        for item in data["result"]:
            labels = item.get("metric") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
                raise NodeGpuError(f"{where}: malformed sample {json.dumps(item)[:200]}")
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            gpu = labels.get("gpu", "")
            if key not in asked or not isinstance(gpu, str):
                continue
            try:
                stamp = float(value[0])
                reading = float(value[1])
            except (TypeError, ValueError) as e:
                raise NodeGpuError(f"{where}: malformed value {json.dumps(value)[:100]}") from e
            if not math.isfinite(stamp):
                continue  # no time to hold it to
            # not activity: the GPU is held, its activity unknown rather than trusted
            percent = min(reading, 100.0) if math.isfinite(reading) \
                and 0 <= reading <= ABSURD_PERCENT else None
            metric = labels.get(SOURCE_LABEL)
            metric = metric if metric in (ENGINE_ACTIVE, GPU_UTIL) else "?"
            found.setdefault(key, {})[gpu] = (percent, metric, stamp)
        out: dict[tuple[str, str], PodGpu] = {}
        for (ns, pod), gpus in found.items():
            ids = tuple(sorted(gpus, key=_gpu_order))
            activity = tuple(gpus[g][0] for g in ids)
            states = tuple(gpu_activity(a, self.busy_percent) for a in activity)
            metrics = sorted({gpus[g][1] for g in ids})
            out[(ns, pod)] = PodGpu(
                namespace=ns, pod=pod, activity=activity, gpu_ids=ids,
                busy=sum(1 for s in states if s == BUSY),
                metric=",".join(metrics), time=max(gpus[g][2] for g in ids), states=states)
        return out


# --- pod names (KubeSpawner 7) ---------------------------------------------------------------
#
# Re-implemented from jupyterhub-kubespawner 7.1.0, kubespawner/slugs.py (safe_slug,
# multi_slug, strip_and_hash, _extract_safe_name, escape_slug) and kubespawner/spawner.py
# (KubeSpawner._expand_user_properties), and escapism 1.1.0's escape(), so that the service
# needs neither. tests/test_hub_nodegpu.py holds it to outputs of the real code.

_ALPHA_LOWER = tuple(string.ascii_lowercase)
_ALPHANUM_LOWER = tuple(string.ascii_lowercase + string.digits)
_OBJECT_PATTERN = re.compile(r"[a-z0-9\-]+\Z")
_NON_ALPHANUM = re.compile(r"[^a-z0-9]+")
_HASH_LENGTH = 8
_ESCAPE_SAFE = frozenset(string.ascii_lowercase + string.digits)
_SLUG_MAX_LENGTH = 48  # _expand_user_properties's per-field budget


def _is_valid_object_name(s: str) -> bool:
    return (0 < len(s) <= 63 and s.startswith(_ALPHA_LOWER) and s.endswith(_ALPHANUM_LOWER)
            and _OBJECT_PATTERN.match(s) is not None)


def _extract_safe_name(name: str, max_length: int) -> str:
    safe = _NON_ALPHANUM.sub("-", name.lower())
    safe = safe.lstrip("-")[:max_length].rstrip("-")
    if safe and not safe.startswith(_ALPHA_LOWER):
        safe = "x-" + safe[: max_length - 2]
    return safe or "x"


def _strip_and_hash(name: str, max_length: int = 32) -> str:
    name_length = max_length - (_HASH_LENGTH + 3)
    if name_length < 1:
        raise ValueError(f"Cannot make safe names shorter than {_HASH_LENGTH + 4}")
    digest = hashlib.sha256(name.encode("utf8")).hexdigest()[:_HASH_LENGTH]
    return f"{_extract_safe_name(name, name_length)}---{digest}"


def safe_slug(name: str, max_length: int | None = None) -> str:
    """KubeSpawner's safe slug: the name itself when already a valid object name (and no
    `--`), else a stripped form with a hash of the original."""
    if "--" not in name and _is_valid_object_name(name) and \
            (max_length is None or len(name) <= max_length):
        return name
    return _strip_and_hash(name, max_length=max_length or 32)


def multi_slug(names: list[str], max_length: int = 48) -> str:
    """KubeSpawner's `{name1}--{name2}---{hash}`, one hash over all names."""
    hasher = hashlib.sha256()
    hasher.update(names[0].encode("utf8"))
    for name in names[1:]:
        hasher.update(b"\xff")
        hasher.update(name.encode("utf8"))
    digest = hasher.hexdigest()[:_HASH_LENGTH]
    per_name = (max_length - (_HASH_LENGTH + 1)) // len(names)
    name_max_length = per_name - 2
    if name_max_length < 2:
        raise ValueError(f"Not enough characters for {len(names)} names: {max_length}")
    return "--".join(_extract_safe_name(n, name_max_length) for n in names) + f"---{digest}"


def escape_slug(name: str) -> str:
    """The legacy (`slug_scheme = "escape"`) slug: escapism with `-` as the escape character,
    each UTF-8 byte of an unsafe character as `-` + its hex, then lowercased."""
    out = []
    for c in name:
        if c in _ESCAPE_SAFE:
            out.append(c)
        else:
            out.extend(f"-{byte:X}" for byte in c.encode("utf8"))
    return "".join(out).lower()


DEFAULT_POD_NAME_TEMPLATE = "jupyter-{user_server}"


def pod_name(template: str, user: str, server: str = "", *, namespace: str = "",
             hub_namespace: str | None = None, user_id: int | None = None,
             slug_scheme: str = "safe") -> str:
    """The pod KubeSpawner 7 names for `user`'s server `server` ("" for the default server)
    from its `pod_name_template` (default `jupyter-{user_server}`), with its default `safe`
    slug scheme or the legacy `escape` one. `namespace` fills `{namespace}`, `hub_namespace`
    `{hubnamespace}` (the namespace by default; KubeSpawner writes "default" as "user"),
    `user_id` `{userid}`. A field this cannot know raises ValueError."""
    safe_servername = safe_slug(server, max_length=_SLUG_MAX_LENGTH) if server else ""
    safe_username = safe_slug(user, max_length=_SLUG_MAX_LENGTH)
    if len(safe_username) + len(safe_servername) + 2 > _SLUG_MAX_LENGTH:
        safe_user_server = multi_slug([user, server], max_length=_SLUG_MAX_LENGTH)
    elif server:
        safe_user_server = f"{safe_username}--{safe_servername}"
    else:
        safe_user_server = safe_username
    escaped_username = escape_slug(user)
    escaped_servername = escape_slug(server)
    if slug_scheme == "safe":
        username, servername, user_server = safe_username, safe_servername, safe_user_server
    elif slug_scheme == "escape":
        username, servername = escaped_username, escaped_servername
        user_server = f"{escaped_username}--{escaped_servername}" if servername \
            else escaped_username
    else:
        raise ValueError(f"slug scheme must be 'safe' or 'escape', not {slug_scheme!r}")
    hubnamespace = namespace if hub_namespace is None else hub_namespace
    fields: dict[str, Any] = {
        "unescaped_username": user,
        "unescaped_servername": server,
        "hubnamespace": "user" if hubnamespace == "default" else hubnamespace,
        "username": username,
        "servername": servername,
        "user_server": user_server,
        "safe_username": safe_username,
        "safe_servername": safe_servername,
        "safe_user_server": safe_user_server,
        "escaped_username": escaped_username,
        "escaped_servername": escaped_servername,
        "escaped_user_server": f"{escaped_username}--{escaped_servername}",
        "namespace": namespace,
    }
    if user_id is not None:
        fields["userid"] = user_id
    try:
        rendered = template.format(**fields)
    except (KeyError, IndexError) as e:
        raise ValueError(f"pod_name_template {template!r}: field {e} is not known here") from e
    # as KubeSpawner: strip a trailing "-" left by an empty server name, unless the template
    # itself ends with one
    return rendered if template.endswith("-") else rendered.rstrip("-")


def pod_of_state(state: Any) -> tuple[str, str] | None:
    """(namespace, pod) from KubeSpawner's saved state (its `get_state`: `pod_name`,
    `namespace`), which wins over the template: the template may have changed since the pod
    was started. None when the state does not say."""
    if not isinstance(state, Mapping):
        return None
    name, ns = state.get("pod_name"), state.get("namespace")
    if isinstance(name, str) and name and isinstance(ns, str) and ns:
        return ns, name
    return None
