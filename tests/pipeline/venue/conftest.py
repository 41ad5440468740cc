"""Fixtures of the venue tests: servers started through ``Venues`` and WebSocket clients, all stopped
and closed at teardown even when a test fails."""

from __future__ import annotations

import pytest

from pipeline.venue.server import VenueServer
from tests.support.venue import Client, Venues


@pytest.fixture
def venues():
    v = Venues()
    try:
        yield v
    finally:
        v.stop_all()


@pytest.fixture
def clients():
    made: list[Client] = []

    def connect(server: VenueServer, instruments=None) -> Client:
        c = Client(server.url, instruments)
        made.append(c)
        return c

    yield connect
    for c in made:
        c.close()
