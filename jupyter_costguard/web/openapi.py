"""`GET openapi.json`: the API's one contract, served as read once by `common/apischema`
(which also checks request bodies against it; the tests hold every handler to it)."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_costguard.common.apischema import DOCUMENT_JSON, OPENAPI_PATH
from jupyter_costguard.web.base import CostguardHandler

__all__ = ["OPENAPI_PATH", "OpenAPIHandler"]


class OpenAPIHandler(CostguardHandler):
    @web.authenticated
    @authorized
    def get(self) -> None:
        self.write_json_bytes(DOCUMENT_JSON)
