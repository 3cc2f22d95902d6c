"""Alerts: list and raise, dismiss and snooze.

Changes are made in memory on the IO loop and written by the service's worker thread, which
the request awaits (bounded), so an answered change is on disk."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_costguard.alerts.requests import (
    DISMISS_REQUEST,
    check,
    parse_raise_request,
    parse_snooze_request,
)
from jupyter_costguard.alerts.store import AlertError, AlertLimitError
from jupyter_costguard.common.owner import owner_doc
from jupyter_costguard.web.base import CostguardHandler


def _alert_error(e: AlertError) -> web.HTTPError:
    return web.HTTPError(429 if isinstance(e, AlertLimitError) else 400, "%s", str(e))


class _AlertHandler(CostguardHandler):
    def _owned(self, alert: dict[str, Any]) -> dict[str, Any]:
        """An alert document with whose server it is (null outside a hub)."""
        return {**alert, **owner_doc(self.service.owner)}


class AlertsHandler(_AlertHandler):
    """List alerts (GET) and raise one (POST: tests, admins, scripts)."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        self._check_params("notebook", "include")
        include = self.get_query_argument("include", "active")
        if include not in ("active", "all"):
            raise web.HTTPError(400, "include must be 'active' or 'all', not %r", include)
        notebook = self.get_query_argument("notebook", None)
        if notebook is not None:
            notebook = notebook.strip("/")
        now = self.alerts.clock()
        status = self.service.published.views.data["status"]
        self.write_json({
            "simulated": status["simulated"],
            "currency": status["currency"],
            "time": now,
            **owner_doc(self.service.owner),
            "alerts": [self._owned(a) for a in self.alerts.documents(
                now, notebook=notebook, include_all=include == "all")],
        })

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self._check_params()
        try:
            request = parse_raise_request(self.read_json_body())
            alert, created = self.alerts.upsert(**request)
        except AlertError as e:
            raise _alert_error(e) from None
        await self.service.alerts_changed()
        self.write_json(self._owned(alert.to_dict(self.alerts.clock())),
                        201 if created else 200)


class AlertActionHandler(_AlertHandler):
    """POST alerts/{id}/dismiss and alerts/{id}/snooze; both idempotent."""

    def initialize(self, action: str) -> None:
        self.action = action

    @web.authenticated
    @authorized
    async def post(self, alert_id: str) -> None:
        self._check_params()
        if self.alerts.get(alert_id) is None:
            raise web.HTTPError(404, "no such alert: %s", alert_id)
        body = self.read_json_body()
        try:
            if self.action == "snooze":
                alert = self.alerts.snooze(alert_id, parse_snooze_request(body))
            else:
                check(DISMISS_REQUEST, body)
                alert = self.alerts.dismiss(alert_id)
        except AlertError as e:
            raise _alert_error(e) from None
        if alert is None:  # pruned in between
            raise web.HTTPError(404, "no such alert: %s", alert_id)
        await self.service.alerts_changed()
        self.write_json(self._owned(alert.to_dict(self.alerts.clock())))
