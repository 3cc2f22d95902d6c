"""REST handlers for hibernate (issue 37): thin over `HibernateService`.

Permissions (the authorizer's, besides authentication): hibernating runs code in the kernel
and shuts it down, and a restore runs code (loading pickles) in one, so both need `write` on
`costguard` and `execute` on `kernels`, as running a job does; listing needs `read` on
`costguard`, deleting `write`."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_costguard.hibernate.errors import HibernateError
from jupyter_costguard.hibernate.requests import parse_restore
from jupyter_costguard.hibernate.service import HibernateService
from jupyter_costguard.web.base import CostguardHandler
from jupyter_costguard.web.jobs import EXECUTE


class HibernateHandler(CostguardHandler):
    @property
    def hibernation(self) -> HibernateService:
        svc: HibernateService | None = self.settings.get("costguard_hibernate")
        if svc is None:
            raise web.HTTPError(503, "%s", self.settings.get("costguard_hibernate_off")
                                or "hibernate is not available on this server")
        return svc

    async def _call(self, work: Any) -> Any:
        try:
            return await work
        except HibernateError as e:
            raise web.HTTPError(e.status, "%s", str(e)) from None

    def _no_body(self, what: str) -> None:
        if self.read_json_body():
            raise web.HTTPError(400, "%s takes no request body", what)


class KernelHibernateHandler(HibernateHandler):
    """POST kernels/{kernel_id}/hibernate: save the kernel's variables, then shut it down."""

    @web.authenticated
    @authorized
    async def post(self, kernel_id: str) -> None:
        self._check_params()
        await self.require(*EXECUTE)
        self._no_body("hibernate")
        self.write_json(await self._call(self.hibernation.hibernate(kernel_id)))


class SnapshotListHandler(HibernateHandler):
    """GET snapshots[?notebook=path]: newest first."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self._check_params("notebook")
        notebook = self.get_query_argument("notebook", None)
        self.write_json(await self.hibernation.listing(notebook.strip("/") if notebook else None))


class SnapshotRestoreHandler(HibernateHandler):
    """POST snapshots/{id}/restore with {"kernel_id"}: load it into that kernel."""

    @web.authenticated
    @authorized
    async def post(self, snapshot_id: str) -> None:
        self._check_params()
        await self.require(*EXECUTE)
        try:
            kernel_id = parse_restore(self.read_json_body())
        except HibernateError as e:
            raise web.HTTPError(e.status, "%s", str(e)) from None
        self.write_json(await self._call(self.hibernation.restore(snapshot_id, kernel_id)))


class SnapshotHandler(HibernateHandler):
    """DELETE snapshots/{id}: forget it and remove its files."""

    @web.authenticated
    @authorized
    async def delete(self, snapshot_id: str) -> None:
        self._check_params()
        await self._call(self.hibernation.delete(snapshot_id))
        self.set_status(204)
        self.finish()


def routes(url: Any) -> list[tuple[str, type[web.RequestHandler], dict[str, Any]]]:
    return [
        (url(r"/kernels/([^/]+)/hibernate"), KernelHibernateHandler, {}),
        (url("/snapshots"), SnapshotListHandler, {}),
        (url(r"/snapshots/([^/]+)/restore"), SnapshotRestoreHandler, {}),
        (url(r"/snapshots/([^/]+)"), SnapshotHandler, {}),
    ]
