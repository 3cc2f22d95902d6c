"""Whose server this is: the JupyterHub user and server name the Hub's spawner sets.

A platform team sums spend by user across servers, so every document, alert, job record and
series says whose it is. Outside a hub there is no owner and nothing is added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENV_USER = "JUPYTERHUB_USER"
ENV_SERVER = "JUPYTERHUB_SERVER_NAME"


@dataclass(frozen=True)
class Owner:
    user: str
    server: str  # "" for the user's default server


def owner_from_environ(environ: Mapping[str, str]) -> Owner | None:
    """The Hub's user and server name, or None when this server is not a hub's."""
    user = environ.get(ENV_USER, "").strip()
    if not user:
        return None
    return Owner(user, environ.get(ENV_SERVER, "").strip())


def owner_doc(owner: Owner | None) -> dict[str, Any]:
    """The two fields every document carries (null outside a hub)."""
    return {"user": owner.user if owner else None, "server": owner.server if owner else None}


def owner_from_doc(doc: Any) -> Owner | None:
    """The owner a stored `owner_doc` names (a job record's ``owner``), None when it names
    none or is not one: records are read back from disk and may be old or edited."""
    if not isinstance(doc, dict) or not isinstance(doc.get("user"), str) or not doc["user"]:
        return None
    server = doc.get("server")
    return Owner(doc["user"], server if isinstance(server, str) else "")
