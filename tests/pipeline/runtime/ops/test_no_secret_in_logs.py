"""No secret in any log of a real run: the whole pipeline (every stage against the paper venue, orders
flowing, so the order sender signs requests with ACCESS-KEY / ACCESS-SIGN / ACCESS-PASSPHRASE) with
the ops server on; ops requests carry the operator token in the query string, the path, a body and
headers, with a right and a wrong token; the venue gets requests with its key, secret and passphrase
in the query string and headers, signed right and wrong. Then, after ``down``, every file the run
wrote (the log dir, the run dir, the supervisor's output) is searched for the token and for the
paper key's three values (secrets/*.json: api_key, secret, passphrase; pipeline/trading/bitget/signing.py):
one hit fails the test, naming the file and the line."""

from __future__ import annotations

import http.client
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.chaos.flow import FLOW_MODEL, orders_flow
from bench.chaos.harness import ChaosPipeline
from bench.pipeline_config import KEY
from pipeline.runtime.ops.tokenfile import generate_token_file, read_token
from pipeline.runtime.portfile import read_port_file
from pipeline.trading.bitget.rest import build_unfilled
from pipeline.trading.bitget.signing import load_credentials
from tests.support.ops import free_port

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[4]


def _hook(port: int, token_file: Path):
    def hook(text: str) -> str:
        text = orders_flow(text)
        return text.replace("[supervisor]\n", f'[supervisor]\nops_port = {port}\nops_token_file = "{token_file}"\n', 1)
    return hook


def _ask(port: int, method: str, target: str, headers: dict, body: bytes | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, target, body=body, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def _ops_requests(port: int, token: str) -> list[int]:
    """Ops requests with the token everywhere a client might put it; the statuses."""
    host = {"Host": f"127.0.0.1:{port}"}
    good, wrong = {**host, "Authorization": f"Bearer {token}"}, {**host, "Authorization": f"Bearer x{token[1:]}"}
    asks = [
        ("POST", f"/api/halt?token={token}", host, None),  # the probe's request: token in the query only
        ("POST", f"/api/halt?token={token}", wrong, None),
        ("POST", f"/api/restart/{token}", good, None),  # in the path (404: not a stage name)
        ("POST", f"/{token}?{token}", good, b"{}"),
        ("POST", "/api/halt", {**host, "Authorization": f"Basic {token}"}, None),
        ("POST", "/api/halt", {**host, "X-Token": token, "Cookie": f"token={token}"}, None),
        ("POST", "/api/halt", good, f'{{"token": "{token}"}}'.encode()),  # a body it does not take (400)
        ("GET", f"/metrics?token={token}", good, None),
        ("POST", "/api/halt", good, b"{}"),  # right: trading halts ...
        ("POST", f"/api/resume?token={token}", good, None),  # ... and resumes
    ]
    return [_ask(port, m, t, h, b) for m, t, h, b in asks]


def _venue_requests(port: int) -> list[int]:
    """Requests to the venue with its key's values in the query and headers, signed right and wrong."""
    creds = load_credentials(KEY)
    req = build_unfilled(creds, int(time.time() * 1000))
    secrets = f"apiKey={creds.api_key}&secret={creds.secret}&passphrase={creds.passphrase}"
    bad_sign = {**req.headers, "ACCESS-SIGN": "x" + req.headers["ACCESS-SIGN"][1:]}
    asks = [
        (req.method, req.target, req.headers),  # right
        (req.method, f"{req.target}{'&' if '?' in req.target else '?'}{secrets}", req.headers),  # in the query
        (req.method, f"{req.target.partition('?')[0]}&{secrets}", req.headers),  # in the path (no such path)
        (req.method, req.target, bad_sign),
        (req.method, req.target, {**req.headers, "ACCESS-PASSPHRASE": creds.secret}),
        (req.method, f"/api/v2/{creds.secret}?{secrets}", req.headers),  # no such path
        ("PUT", req.target, req.headers),
    ]
    return [_ask(port, m, t, h) for m, t, h in asks]


def _hits(folder: Path, secrets: dict[str, str]) -> list[str]:
    """Where any secret occurs in any file under ``folder``: 'file:line: which'."""
    out = []
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        for n, line in enumerate(f.read_bytes().splitlines(), 1):
            out += [f"{f.relative_to(folder)}:{n}: {what}" for what, s in secrets.items() if s.encode() in line]
    return out


@pytest.mark.timeout(300)
def test_no_log_of_a_run_holds_the_ops_token_or_the_paper_key(tmp_path):
    token_file = tmp_path / "ops.token"
    generate_token_file(token_file)
    token, creds, port = read_token(token_file), load_credentials(KEY), free_port()
    secrets = {"ops token": token, "api_key": creds.api_key, "secret": creds.secret, "passphrase": creds.passphrase}
    with ChaosPipeline(rate=500, llm=False, model=FLOW_MODEL, text_hook=_hook(port, token_file),
                       name="no_secret") as p:
        ops = _ops_requests(port, token)
        assert ops == [401, 401, 404, 404, 401, 401, 400, 200, 200, 200], ops
        venue = _venue_requests(read_port_file(p.tmp / "run" / "venue.rest.port"))
        assert venue[0] == 200 and all(s >= 400 for s in venue[1:]), venue
        p.wait(lambda: p.stage("sender").get("acked", 0) >= 5, 60, "orders signed, sent and acknowledged")
        done = subprocess.run([sys.executable, "-m", "pipeline", "--config", str(p.cfg_path), "down"], cwd=REPO,
                              capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        p.up_proc.wait(timeout=60)
        logs = sorted(f.name for f in Path(p.cfg.supervisor.log_dir).iterdir())
        assert {"supervisor.log", "venue.log", "sender.log"} <= set(logs), logs
        refused = (Path(p.cfg.supervisor.log_dir) / "supervisor.log").read_text().count('"ops_refused"')
        assert refused == 7, f"{refused} ops refusals logged: the requests did not reach the log being searched"
        hits = _hits(p.tmp, secrets)
        wide = {f.name: oct(f.stat().st_mode & 0o777) for f in Path(p.cfg.supervisor.log_dir).iterdir()
                if f.is_file() and f.stat().st_mode & 0o077}
    assert wide == {}, f"log files readable beyond their owner: {wide}"
    assert hits == [], "secrets in the run's files:\n" + "\n".join(hits[:20])
