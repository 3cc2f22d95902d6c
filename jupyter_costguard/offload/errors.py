"""The one error a job request is refused with, raised by the service and the backends alike
(so a backend never imports the service)."""

from __future__ import annotations


class JobError(Exception):
    """A request the service refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
