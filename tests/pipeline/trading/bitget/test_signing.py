"""Bitget v2 REST signing (pipeline/trading/bitget/signing.py): the shared reference vectors, verification,
and credentials that never show their secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pickle

import pytest

from pipeline.trading.bitget.signing import (Credentials, generate_paper_credentials, load_credentials, prehash, query_string,
                                     sign, verify, write_credentials_file)
from pipeline.runtime.errors import ConfigError

SECRET = "bitget-test-secret"
MIX_BODY = ('{"productType":"usdt-futures","symbol":"BTCUSDT","size":"8","marginMode":"crossed","side":"buy",'
            '"orderType":"limit","clientOid":"channel#123456"}')
SPOT_BODY = ('{"symbol":"BTCUSDT","side":"buy","orderType":"limit","force":"gtc","price":"23222.5","size":"1",'
             '"clientOid":"121211212122"}')


def test_hmac_sha256_sanity_vector_rfc4231_case_2():
    assert hmac.new(b"Jefe", b"what do ya want for nothing?", hashlib.sha256).hexdigest() == (
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")


def test_prehash_is_timestamp_method_path_query_body():
    assert prehash(16273667805456, "get", "/api/mix/v2/market/depth", "limit=20&symbol=BTCUSDT") == (
        b"16273667805456GET/api/mix/v2/market/depth?limit=20&symbol=BTCUSDT")
    assert prehash("16273667805456", "POST", "/api/v2/mix/order/place-order", "", MIX_BODY) == (
        b"16273667805456POST/api/v2/mix/order/place-order" + MIX_BODY.encode())


@pytest.mark.parametrize("ts, method, path, query, body, expected", [
    ("16273667805456", "GET", "/api/mix/v2/market/depth", "limit=20&symbol=BTCUSDT", "",
     "WtsFnFmSuOeEzqug0GD9yGqAENc0GOd62PkQKoWC9rE="),
    ("16273667805456", "POST", "/api/v2/mix/order/place-order", "", MIX_BODY,
     "wpQMoiACciD4g+O0wftRWyN8dm23TIEOIsbaEMpYJqQ="),
    ("1659076670000", "POST", "/api/v2/spot/trade/place-order", "", SPOT_BODY,
     "LJxEuoZ+9jdSlIkD1G8XAtg0wiesnx604+GExQ5KlFk="),
])
def test_signatures_match_the_shared_vectors(ts, method, path, query, body, expected):
    assert sign(SECRET, ts, method, path, query, body) == expected
    assert sign(SECRET.encode(), int(ts), method, path, query, body.encode()) == expected
    assert verify(SECRET, expected, ts, method, path, query, body)
    creds = Credentials("key", SECRET, "pass")  # the keyed-once signer the sender uses
    assert creds.sign(ts, method, path, query, body) == expected
    assert creds.sign(ts, method, path, query, body) == expected  # the key state is copied, never consumed
    assert creds.headers(int(ts), method, path, query, body)["ACCESS-SIGN"] == expected


def test_verify_rejects_any_change():
    good = sign(SECRET, 1659076670000, "POST", "/api/v2/spot/trade/place-order", "", SPOT_BODY)
    assert not verify("other-secret", good, 1659076670000, "POST", "/api/v2/spot/trade/place-order", "", SPOT_BODY)
    assert not verify(SECRET, good, 1659076670001, "POST", "/api/v2/spot/trade/place-order", "", SPOT_BODY)
    assert not verify(SECRET, good, 1659076670000, "POST", "/api/v2/spot/trade/place-order", "",
                      SPOT_BODY.replace("23222.5", "23222.6"))
    assert not verify(SECRET, "not base64 ✗", 1659076670000, "POST", "/api/v2/spot/trade/place-order", "", SPOT_BODY)
    assert len(base64.b64decode(good)) == 32


def test_query_string_sorts_by_key_and_skips_none():
    assert query_string({"symbol": "BTCUSDT", "limit": 20, "after": None}) == "limit=20&symbol=BTCUSDT"
    assert query_string({}) == "" and query_string(None) == ""


def test_headers_carry_the_signature_and_repr_hides_the_secret():
    c = Credentials("key-id-1", "s3cr3t-value", "pass-phrase")
    h = c.headers(1659076670000, "POST", "/api/v2/spot/trade/place-order", "", SPOT_BODY)
    assert h["ACCESS-SIGN"] == sign("s3cr3t-value", 1659076670000, "POST", "/api/v2/spot/trade/place-order", "", SPOT_BODY)
    assert h["ACCESS-TIMESTAMP"] == "1659076670000" and h["ACCESS-KEY"] == "key-id-1"
    for text in (repr(c), str(c), f"{c}", repr([c])):
        assert "s3cr3t-value" not in text and "pass-phrase" not in text and "key-id-1" not in text
    with pytest.raises(TypeError):
        pickle.dumps(c)


def test_credentials_from_the_environment_name_missing_variables_only():
    env = {"SHMPIPE_API_KEY": "k", "SHMPIPE_API_SECRET": "s", "SHMPIPE_API_PASSPHRASE": "p"}
    c = load_credentials(env=env)
    assert (c.api_key, c.secret, c.passphrase) == ("k", "s", "p")
    with pytest.raises(ConfigError, match="SHMPIPE_API_SECRET") as e:
        load_credentials(env={"SHMPIPE_API_KEY": "k", "SHMPIPE_API_PASSPHRASE": "p"})
    assert "'k'" not in str(e.value)


def test_credentials_file_must_be_0600_and_well_formed(tmp_path):
    path = tmp_path / "keys.json"
    write_credentials_file(path, Credentials("k", "very-secret", "p"))
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_credentials(path).secret == "very-secret"
    with pytest.raises(FileExistsError):
        write_credentials_file(path, Credentials("k", "s", "p"))
    os.chmod(path, 0o640)
    with pytest.raises(ConfigError, match="0640") as e:
        load_credentials(path)
    assert "very-secret" not in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"api_key": "k", "secret": "very-secret"}')
    os.chmod(bad, 0o600)
    with pytest.raises(ConfigError, match="exactly the keys") as e:
        load_credentials(bad)
    assert "very-secret" not in str(e.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_credentials(tmp_path / "none.json")


@pytest.mark.parametrize("field", ["api_key", "secret", "passphrase"])
@pytest.mark.parametrize("value", ["key\r\nX-Injected: 1", "tab\there", "caf\u00e9"])
def test_credentials_that_could_not_travel_in_an_http_header_are_refused_without_showing_them(field, value):
    parts = {"api_key": "k", "secret": "s", "passphrase": "p", field: value}
    with pytest.raises(ConfigError, match=f"{field} must be printable ASCII") as e:
        Credentials(**parts)
    assert value not in str(e.value)


def test_paper_credentials_are_generated_once(tmp_path):
    path = tmp_path / "secrets" / "paper.json"
    assert generate_paper_credentials(path) is True
    first = load_credentials(path)
    assert generate_paper_credentials(path) is False
    assert load_credentials(path).secret == first.secret and len(first.secret) >= 32
