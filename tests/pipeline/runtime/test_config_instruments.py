"""The instruments section of the config (pipeline/runtime/config.py, ``InstrumentConfig``): the product
type, and a perpetual's contract size, margin coin and mode; a bad value is an error naming the field."""

from __future__ import annotations

import pytest

from pipeline.runtime.config import parse_config
from pipeline.runtime.errors import ConfigError

SPOT = '[[instruments]]\nid = 1\nsymbol = "BTCUSDT"\ntick_size = 0.1\nlot_size = 0.0001\n'
PERP = ('[[instruments]]\nid = 2\nsymbol = "ETHUSDT"\ntick_size = 0.01\nlot_size = 0.01\n'
        'product_type = "USDT-FUTURES"\ncontract_size = 0.01\n')


def test_spot_is_the_default_and_a_perpetual_carries_its_contract():
    cfg = parse_config(SPOT + PERP)
    spot, perp = cfg.instruments
    assert (spot.product_type, spot.perpetual, spot.contract_size) == ("SPOT", False, 0.0)
    assert (perp.product_type, perp.perpetual, perp.contract_size, perp.margin_coin, perp.margin_mode) == \
        ("USDT-FUTURES", True, 0.01, "USDT", "crossed")


@pytest.mark.parametrize("text, field", [
    (PERP.replace("USDT-FUTURES", "COIN-FUTURES"), "$.instruments[0].product_type"),
    (PERP.replace("USDT-FUTURES", "usdt-futures"), "$.instruments[0].product_type"),
    (PERP.replace("contract_size = 0.01", "contract_size = 0"), "$.instruments[0].contract_size"),
    (PERP.replace("contract_size = 0.01", "contract_size = -0.01"), "$.instruments[0].contract_size"),
    (PERP.replace("contract_size = 0.01\n", ""), "$.instruments[0].contract_size"),
    (PERP.replace("contract_size = 0.01", "contract_size = inf"), "$.instruments[0].contract_size"),
    (PERP.replace("lot_size = 0.01", "lot_size = 0.02"), "$.instruments[0].lot_size"),
    (SPOT + "contract_size = 1.0\n", "$.instruments[0].contract_size"),
    (PERP + 'margin_mode = "hedged"\n', "$.instruments[0].margin_mode"),
    (PERP + 'margin_coin = "usdt"\n', "$.instruments[0].margin_coin"),
])
def test_a_bad_product_field_is_a_config_error_naming_it(text, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace("]", r"\]").replace("$", r"\$")):
        parse_config(text)
