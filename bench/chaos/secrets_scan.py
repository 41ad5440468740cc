"""Key material and permissions against the real pipeline (issue #9): run by ``bench.chaos`` and
``tests/chaos``.

``secrets_and_permissions``: a run with orders flowing, then every file of the run (logs, audit log,
sender journal, supervisor output, config), the status (CLI text and JSON) and every file under
``bench/results`` scanned for the paper key's api key, secret and passphrase; every /dev/shm entry of
the run (segments, semaphores) and every socket file in its run folder must be mode 0600; every
LISTEN TCP socket owned by the run's processes must be bound to 127.0.0.1 / ::1.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import orjson

from bench.chaos.harness import Row, judged_row
from bench.chaos.kill_switch import order_flow
from bench.pipeline_config import KEY, REPO


def _socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets ``pid`` holds open (/proc/<pid>/fd)."""
    out = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    out.add(int(link[8:-1]))
    return out


def listening_sockets(pids) -> list[tuple[int, str, int]]:
    """(pid, local address, port) of every TCP LISTEN socket owned by ``pids`` (/proc/net/tcp, tcp6)."""
    owner = {}
    for pid in pids:
        for ino in _socket_inodes(pid):
            owner[ino] = pid
    out = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                f = line.split()
                if f[3] != "0A" or int(f[9]) not in owner:
                    continue
                hexaddr, hexport = f[1].split(":")
                raw = bytes.fromhex(hexaddr)
                if name == "tcp":
                    addr = ".".join(str(b) for b in raw[::-1])
                else:
                    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                    addr = str(ipaddress.IPv6Address(b"".join(words)))
                out.append((owner[int(f[9])], addr, int(hexport, 16)))
    return out


LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def key_material_hits(needles: dict[str, bytes], files, texts=()) -> tuple[list[str], int]:
    """Where any of ``needles`` (name -> bytes) occurs: ``"<name> in <file>"`` / ``"<name> in text <i>"``
    for each hit in the files (unreadable ones skipped) and the texts; and how many files were read."""
    hits, read = [], 0
    for q in files:
        try:
            data = Path(q).read_bytes()
        except OSError:
            continue
        read += 1
        hits += [f"{k} in {q}" for k, v in needles.items() if v in data]
    for i, t in enumerate(texts):
        hits += [f"{k} in text {i}" for k, v in needles.items() if v in t]
    return hits, read


def secrets_and_permissions(ChaosPipeline, quick: bool) -> Row:
    from pipeline.trading.bitget.signing import load_credentials

    creds = load_credentials(KEY)
    needles = {"api_key": creds.api_key, "secret": creds.secret, "passphrase": creds.passphrase}
    needles = {k: v.encode() for k, v in needles.items() if v}
    run_s = 2.0 if quick else 10.0
    bad_modes, listens = [], []
    with ChaosPipeline(rate=1000, llm=True, text_hook=order_flow, name="secrets") as p:
        time.sleep(run_s)
        cfg = p.cfg
        prefix = cfg.supervisor.shm_prefix
        shm = [e for e in Path("/dev/shm").iterdir() if prefix in e.name]
        for e in shm:
            mode = stat.S_IMODE(e.stat().st_mode)
            if mode != 0o600:
                bad_modes.append(f"{e} {mode:o}")
        socks = [q for q in Path(cfg.supervisor.run_dir).rglob("*") if q.is_socket()]
        for q in socks:
            mode = stat.S_IMODE(q.stat().st_mode)
            if mode != 0o600:
                bad_modes.append(f"{q} {mode:o}")
        st = p.status()
        pids = [st["supervisor_pid"]] + [x["pid"] for x in st["processes"] if x["pid"]]
        listens = listening_sockets(pids)
        texts = [orjson.dumps(st)]
        r = subprocess.run([sys.executable, "-m", "pipeline", "--config", str(p.cfg_path), "status"], cwd=REPO,
                           capture_output=True, timeout=60)
        texts += [r.stdout, r.stderr]
        sent = p.stage("sender").get("sent", 0)
        # stop here, so the logs are complete, then scan the whole run folder before it is removed
        subprocess.run([sys.executable, "-m", "pipeline", "--config", str(p.cfg_path), "down"], cwd=REPO,
                       capture_output=True, timeout=60)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.up_proc.wait(timeout=30)
        files = [q for q in p.tmp.rglob("*") if q.is_file()]
        results = REPO / "bench" / "results"
        files += [q for q in results.rglob("*") if q.is_file()] if results.exists() else []
        found, scanned = key_material_hits(needles, files, texts)
    not_local = [x for x in listens if x[1] not in LOOPBACK]
    checks = {
        "orders were signed and sent": sent > 0,
        "no key material anywhere": not found,
        "every shm entry and socket file 0600": not bad_modes and len(shm) > 0 and len(socks) > 0,
        "nothing listens beyond 127.0.0.1": not not_local and len(listens) > 0,
    }
    return judged_row(
        "secrets_and_permissions", checks, name_failed=False,
        injected=f"a {run_s:.0f} s run with signed orders ({sent} sent); scan for the paper key's api key, "
                 f"secret, passphrase",
        did=f"scanned {scanned} files + status text/JSON: {len(found)} hits{(' ' + str(found[:5])) if found else ''}; "
            f"{len(shm)} shm entries + {len(socks)} socket files, {len(bad_modes)} not 0600"
            f"{(' ' + str(bad_modes[:5])) if bad_modes else ''}; {len(listens)} LISTEN sockets, "
            f"{len(not_local)} beyond loopback{(' ' + str(not_local)) if not_local else ''}",
        figure=f"{len(found)} key hits, {len(bad_modes)} bad modes, {len(not_local)} non-local listeners",
        details={"listens": listens, "shm": [e.name for e in shm]})
