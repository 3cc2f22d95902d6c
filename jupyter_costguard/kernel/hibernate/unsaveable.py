"""Values that hold live resources (a paused frame, a file handle, a connection, a thread):
they cannot live outside the process, so a snapshot cannot carry them. They are named with a
reason the user can act on, without trying to pickle them, whether they are a name's value or
are found inside one while it is pickled (`LiveResource`). Only these may be left behind by a
save (and only when the user or the admin said so: `snapshot.save`'s `leave`); any other value
that fails to pickle is an unexpected failure, named with the exception, and fails the save."""

from __future__ import annotations

import io
import socket
import sqlite3
import subprocess
import sys
import threading
import types
from typing import Any

_LOCKS = (type(threading.Lock()), type(threading.RLock()), threading.Condition,
          threading.Semaphore, threading.Event, threading.Barrier)

#: packages whose Connection/Cursor/Engine/Client/Session objects hold a network connection
_DB_PACKAGES = frozenset({"psycopg", "psycopg2", "pymysql", "MySQLdb", "mysql", "sqlalchemy",
                          "pymongo", "redis", "duckdb", "cx_Oracle", "oracledb", "pyodbc",
                          "snowflake", "clickhouse_driver", "cassandra"})
_DB_SUFFIXES = ("Connection", "Cursor", "Engine", "Client", "Session", "Pool")

#: torch types that are live resources: a data loader's worker processes, CUDA streams
_TORCH_LIVE = (("torch.utils.data.dataloader", "_BaseDataLoaderIter",
                "a data loader's iterator (its worker processes); make a new one from the loader"),
               ("torch.cuda", "Stream", "a CUDA stream"),
               ("torch.cuda", "Event", "a CUDA event"))


class LiveResource(Exception):
    """Raised while pickling a value that holds a live resource; the message says which."""


def why_not(value: Any) -> str | None:
    """Why `value` cannot be saved, or None if it may be (pickling may still fail)."""
    if isinstance(value, types.GeneratorType):
        return "a generator: its paused frame cannot be saved; recreate it after restoring"
    if isinstance(value, types.AsyncGeneratorType):
        return "an async generator: its paused frame cannot be saved"
    if isinstance(value, types.CoroutineType):
        return "a coroutine: its paused frame cannot be saved"
    if isinstance(value, io.IOBase) and not isinstance(value, (io.BytesIO, io.StringIO)):
        name = getattr(value, "name", None)
        where = f" ({name})" if isinstance(name, str) else ""
        return f"an open file{where}: reopen it after restoring"
    if isinstance(value, socket.socket):
        return "a socket: a live connection cannot be saved"
    if isinstance(value, (sqlite3.Connection, sqlite3.Cursor)):
        return "a database connection: reconnect after restoring"
    if isinstance(value, threading.Thread):
        return "a thread: a running thread cannot be saved"
    if isinstance(value, _LOCKS):
        return "a lock: synchronisation state cannot be saved"
    if isinstance(value, subprocess.Popen):
        return "a running process"
    cls = type(value)
    root = (cls.__module__ or "").partition(".")[0]
    if root in _DB_PACKAGES and cls.__name__.endswith(_DB_SUFFIXES):
        return f"a database connection ({root}): reconnect after restoring"
    if root == "multiprocessing":
        return f"a multiprocessing {cls.__name__}: start it again after restoring"
    if root == "concurrent" and cls.__name__.endswith("Executor"):
        return f"a worker pool ({cls.__name__}): start it again after restoring"
    if "torch" in sys.modules:
        for module, name, reason in _TORCH_LIVE:
            live = getattr(sys.modules.get(module), name, None)
            if isinstance(live, type) and isinstance(value, live):
                return reason
    return None
