"""The event log (pipeline/runtime/log.py) and what it removes (pipeline/runtime/redact.py): files
0600, a field whose name says it holds a secret written as ``<redacted>``, others as they are."""

from __future__ import annotations

import json
import stat

import pytest

from pipeline.runtime import redact
from pipeline.runtime.log import open_event_log


def test_a_log_file_is_private_to_its_owner_after_a_rotation_too(tmp_path):
    old = tmp_path / "p.log"
    old.write_text("")
    old.chmod(0o644)  # left by an older run
    log = open_event_log("p", tmp_path, max_bytes=300, backups=2)
    for i in range(20):
        log.info("line", i=i, pad="x" * 40)
    files = sorted(tmp_path.glob("p.log*"))
    assert len(files) >= 2
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}


def test_fields_named_as_secrets_are_redacted_and_others_kept(tmp_path):
    log = open_event_log("p", tmp_path)
    log.warning("probe", token="t0k", api_key="k3y", **{"access-sign": "s1g", "ACCESS-PASSPHRASE": "pp"},
                secret="s3c", signals=7, key_id=3, path="/x", signature="zz", monkey="kept")
    line = json.loads((tmp_path / "p.log").read_text().splitlines()[-1])
    for name in ("token", "api_key", "access-sign", "ACCESS-PASSPHRASE", "secret", "signature", "monkey"):
        assert line[name] == (redact.REDACTED if name != "monkey" else "kept"), name
    assert (line["signals"], line["key_id"], line["path"]) == (7, 3, "/x")
    assert not {"t0k", "k3y", "s1g", "pp", "s3c", "zz"} & set(map(str, line.values()))


@pytest.mark.parametrize("target, logged", [
    ("/api/halt", "/api/halt"),
    ("/api/halt?token=abc", "/api/halt?<redacted>"),
    ("/api/halt?abc", "/api/halt?<redacted>"),
    ("/x#frag", "/x?<redacted>"),
    ("/" + "a" * 100 + "?q", "/" + "a" * 79 + "?<redacted>"),
])
def test_a_request_target_is_logged_without_its_query(target, logged):
    assert redact.target(target) == logged


def test_known_secrets_are_removed_wherever_they_are():
    assert redact.without("/api/restart/S3CR3T/S3CR3T", ["S3CR3T", "", None]) == "/api/restart/<redacted>/<redacted>"
