"""The TOML of the bench configs (``bench.configtext``): each value and block reads back as what was
given, in the order given."""

from __future__ import annotations

import tomllib

import pytest

from bench import configtext as ct


def test_values_read_back_as_given():
    fields = {"flag": True, "off": False, "name": 'a "quoted" path\\x', "n": 10_000, "x": 1e8, "small": 0.0001,
              "list": ["books15", "trade"], "table": {"limits": {"lean_lots": 1, "tif": "IOC"}, "r": 50.0}}
    assert tomllib.loads(ct.lines(fields)) == fields
    assert ct.toml_value(1e8) == "100000000.0" and ct.toml_value(["a", 1]) == '["a", 1]'
    assert ct.inline_table({"a": 1, "b": {"c": "d"}}) == '{ a = 1, b = { c = "d" } }'
    with pytest.raises(TypeError):
        ct.toml_value(None)


def test_blocks_make_a_config_in_the_order_given():
    text = ct.blocks(ct.supervisor(shm_prefix="p", poll_interval_ms=10), ct.ring("md", 512, 1024, "drop"),
                     ct.process("feed", "procs.feed:BitgetFeedAgent", "keep_warm_us = 200\n", outputs=["md"],
                                params={"port_file": "/run/venue.port"}),
                     ct.BTCUSDT)
    assert text.startswith('[supervisor]\nshm_prefix = "p"\n') and "\n\n[[rings]]\n" in text
    assert '[[processes]]\nname = "feed"\nmodule = "procs.feed:BitgetFeedAgent"\nkeep_warm_us = 200\noutputs = ["md"]\n' in text
    doc = tomllib.loads(text)
    assert doc["rings"] == [{"name": "md", "max_payload_bytes": 512, "capacity": 1024, "full_policy": "drop"}]
    assert doc["processes"] == [{"name": "feed", "module": "procs.feed:BitgetFeedAgent", "keep_warm_us": 200,
                                 "outputs": ["md"], "params": {"port_file": "/run/venue.port"}}]
    assert doc["instruments"] == [{"id": 1, "symbol": "BTCUSDT", "venue": "paper", "tick_size": 0.1, "lot_size": 0.0001}]
