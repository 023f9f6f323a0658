"""Every Message-API test runs as a ServerApp would: with a task identity set."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import server_identity


@pytest.fixture(autouse=True)
def _server_identity() -> Iterator[None]:
    with server_identity():
        yield
