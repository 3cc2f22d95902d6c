"""What a client may send to restore a snapshot: checked against the API document's request
schema (`common/apischema`), the one place its fields and limits are written."""

from __future__ import annotations

from typing import Any

from jupyter_costguard.common.apischema import RequestSchema, SchemaError
from jupyter_costguard.hibernate.errors import HibernateError

RESTORE_REQUEST = RequestSchema("RestoreRequest")


def parse_restore(body: Any) -> str:
    """The kernel id a `POST snapshots/{id}/restore` body names; HibernateError (400) naming
    the field otherwise."""
    try:
        RESTORE_REQUEST.check(body)
    except SchemaError as e:
        raise HibernateError(str(e), 400) from None
    kernel_id: str = body["kernel_id"]
    return kernel_id
