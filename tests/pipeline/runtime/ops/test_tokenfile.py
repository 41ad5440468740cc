"""The operator token file (pipeline/runtime/ops/tokenfile.py): made 0600 by setup, read only when it is
safe, compared in constant time; its content never appears in an error."""

from __future__ import annotations

import os
import stat

import pytest

from pipeline.runtime.errors import ConfigError
from pipeline.runtime.ops.tokenfile import generate_token_file, main, read_token, token_matches


def test_setup_creates_a_random_0600_token_once(tmp_path):
    path = tmp_path / "secrets" / "ops.token"
    assert generate_token_file(path) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = read_token(path)
    assert len(token) >= 40 and token.isascii()
    assert generate_token_file(path) is False, "an existing token is kept"
    assert read_token(path) == token
    other = tmp_path / "other.token"
    generate_token_file(other)
    assert read_token(other) != token, "each file gets its own random token"


def test_the_cli_creates_or_keeps_the_file(tmp_path, capsys):
    path = tmp_path / "ops.token"
    assert main([str(path)]) == 0 and "created" in capsys.readouterr().out
    assert main([str(path)]) == 0 and "exists, kept" in capsys.readouterr().out
    assert main([]) == 2


def _written(tmp_path, text: str, mode: int = 0o600):
    path = tmp_path / "ops.token"
    path.write_text(text)
    os.chmod(path, mode)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_token_file_others_can_read_or_write_is_refused_naming_its_mode(tmp_path, mode):
    secret = "s3cret-token-value-0123456789"
    path = _written(tmp_path, secret, mode)
    with pytest.raises(ConfigError, match=f"mode {mode:04o}") as exc:
        read_token(path)
    assert secret not in str(exc.value)


@pytest.mark.parametrize("text, why", [("short", "16-256"), ("has a space inside it somewhere", "without spaces"),
                                       ("x" * 300, "16-256"), ("", "16-256")])
def test_a_token_that_is_not_one_printable_word_is_refused_without_showing_it(tmp_path, text, why):
    path = _written(tmp_path, text)
    with pytest.raises(ConfigError, match=why) as exc:
        read_token(path)
    if text:
        assert text not in str(exc.value)


def test_a_missing_token_file_says_setup_makes_it(tmp_path):
    with pytest.raises(ConfigError, match="does not exist.*make setup"):
        read_token(tmp_path / "nope.token")


def test_non_ascii_is_refused(tmp_path):
    path = tmp_path / "ops.token"
    path.write_bytes("tökentökentökentöken".encode())
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match="not ASCII"):
        read_token(path)


def test_surrounding_whitespace_is_not_part_of_the_token(tmp_path):
    assert read_token(_written(tmp_path, "  abcdefghijklmnopqrstuvwxyz\n")) == "abcdefghijklmnopqrstuvwxyz"


@pytest.mark.parametrize("given, ok", [("abcdefghijklmnop", True), ("abcdefghijklmnoP", False), ("", False),
                                       (None, False), ("abcdefghijklmnop ", False), ("ä" * 16, False)])
def test_token_matches_only_the_exact_token(given, ok):
    assert token_matches("abcdefghijklmnop", given) is ok


def test_no_expected_token_matches_nothing():
    assert token_matches("", "") is False
