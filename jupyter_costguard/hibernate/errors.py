"""The one error a hibernate request is refused with (the handlers answer its status)."""

from __future__ import annotations


class HibernateError(Exception):
    """A request the service refuses; `status` is the HTTP status, the message says why."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status
