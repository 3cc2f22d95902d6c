"""Fixtures of the browser tests only: they drive a server in its own process through
Playwright's sync API, which runs an event loop of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> Iterator[None]:
    """Playwright's sync API runs its own loop here; pytest-jupyter's must stay out
    (these tests use a server in its own process, not pytest-jupyter's)."""
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> Iterator[None]:
    yield None
