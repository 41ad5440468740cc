"""The risk limits (pipeline/trading/risk/limits.py): decoding rejects unknown fields and bad values naming the
field; per-instrument tables resolve with their '*' default."""

from __future__ import annotations

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.trading.risk import RiskGateway, RiskLimits, decode_limits
from tests.support.clock import ManualClock
from tests.support.risk import INSTRUMENTS


def test_limits_reject_unknown_fields_and_bad_values_naming_the_field():
    with pytest.raises(ConfigError, match="max_positon_lots"):
        decode_limits({"max_positon_lots": 3})
    with pytest.raises(ConfigError, match="collar_bps"):
        decode_limits({"collar_bps": -1})
    assert decode_limits(None) == RiskLimits()
    lim = decode_limits({"max_position_lots": {"AAA": 3, "*": 7}})
    gw = RiskGateway(INSTRUMENTS, lim, ManualClock())
    assert (gw.specs[1].max_position_lots, gw.specs[2].max_position_lots) == (3.0, 7.0)
    with pytest.raises(ConfigError, match="no value for 'BBB'"):
        RiskGateway(INSTRUMENTS, decode_limits({"max_position_lots": {"AAA": 3}}), ManualClock())
    with pytest.raises(ConfigError, match="allowed"):
        RiskGateway(INSTRUMENTS, decode_limits({"allowed": ["ZZZ"]}), ManualClock())


@pytest.mark.parametrize("value, ok", [(0.1, True), (2.0, True), (1, True), (0.09, False), (2.01, False),
                                       (0.0, False), (-1.0, False)])
def test_decoding_the_limits_holds_risk_aversion_to_the_documents_range(value, ok):
    if ok:
        assert decode_limits({"risk_aversion": value}).risk_aversion == value
    else:
        with pytest.raises(ConfigError, match=r"^risk: params\.limits\.risk_aversion: Expected `float` [<>]= "):
            decode_limits({"risk_aversion": value})
