"""The venue stage with ``source = "encoded"`` (``procs.venue``): pre-encoded frames of the synthetic
model served to a client, and the params that cannot go with fixed frames refused by name."""

from __future__ import annotations

import pytest

from pipeline.runtime.portfile import read_port_file
from pipeline.venue.encoded_server import EncodedVenueServer
from pipeline.venue.errors import VenueConfigError
from pipeline.venue.sources import EncodedSource
from procs.venue import VenueAgent, parse_params
from tests.support.context import venue_context
from tests.support.venue import Client, sub


def test_the_agent_serves_encoded_frames_of_the_synthetic_model(tmp_path):
    ctx = venue_context(tmp_path, 'source = "encoded", encoded_units = 30, step_ms = 5, speed = 2.0')
    agent = VenueAgent()
    agent.on_start(ctx)
    try:
        assert isinstance(agent.server, EncodedVenueServer) and isinstance(agent.server.source, EncodedSource)
        assert len(agent.server.source.units) == 30 and agent.server.inst_ids == ["BTCUSDT", "ETHUSDT"]
        c = Client(f"ws://127.0.0.1:{read_port_file(tmp_path / 'run' / 'venue.port')}/v2/ws/public")
        try:
            c.subscribe(sub("books15", "BTCUSDT"))
            c.until(lambda d: len(c.seqs.get(("books15", "BTCUSDT"), ())) >= 40, what="40 books15 pushes (a loop)")
            assert c.ok(), c.applied
            assert agent.engine is not None and agent.server.market.levels("BTCUSDT")[0]  # the engine's book
        finally:
            c.close()
    finally:
        agent.on_close()


@pytest.mark.parametrize("params, words", [
    ({"source": "encoded", "gap_every_s": 1.0}, "gap_every_s: source 'encoded' publishes fixed frames"),
    ({"source": "encoded", "bad_checksum_every_s": 1.0}, "bad_checksum_every_s"),
    ({"source": "encoded", "jump_prob": 0.01}, "jump_prob"),
    ({"source": "encoded", "encoded_channels": ["books"]}, "encoded_channels must be some of"),
    ({"source": "encoded", "encoded_units": 0}, "encoded_units"),
])
def test_params_that_fixed_frames_cannot_honour_are_refused_by_name(params, words):
    with pytest.raises(VenueConfigError, match=words):
        parse_params("venue", params)


def test_the_synthetic_source_still_takes_the_frame_faults():
    p = parse_params("venue", {"gap_every_s": 1.0, "jump_prob": 0.01})
    assert p.source == "synthetic" and p.encoded_units == 2_000 and p.encoded_channels == ("books15", "trade")
