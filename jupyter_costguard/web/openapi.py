"""The OpenAPI document every route is described by (the tests hold the handlers to it)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_costguard.web.base import CostguardHandler

OPENAPI_PATH = Path(__file__).with_name("openapi.yaml")


@functools.lru_cache(maxsize=1)
def openapi_json() -> bytes:
    import yaml

    return json.dumps(yaml.safe_load(OPENAPI_PATH.read_text())).encode()


class OpenAPIHandler(CostguardHandler):
    @web.authenticated
    @authorized
    def get(self) -> None:
        self.write_json_bytes(openapi_json())
