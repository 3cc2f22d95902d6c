"""Object storage both the server and a job's pods reach (``c.KubernetesBackend.storage_url``,
any fsspec URL): inputs too big for a ConfigMap go up from the server, outputs come back
from the pod."""

from __future__ import annotations


def put(url: str, data: bytes) -> None:
    import fsspec

    with fsspec.open(url, "wb", auto_mkdir=True) as f:
        f.write(data)


def get(url: str) -> bytes:
    import fsspec

    with fsspec.open(url, "rb") as f:
        data: bytes = f.read()
    return data
