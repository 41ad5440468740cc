"""The command line of the standalone paper venue (``python -m pipeline.venue.server``): its
arguments. Kept apart from the server so the server module stays small."""

from __future__ import annotations

import argparse


def arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pipeline.venue.server",
                                 description="Paper venue: Bitget v2 public WebSocket market data on 127.0.0.1.")
    ap.add_argument("--config", default="configs/default.toml", help="instruments (venue = 'paper') for synthetic")
    ap.add_argument("--port", type=int, default=0, help="0: a free port (printed, and in --port-file)")
    ap.add_argument("--port-file", default=None, help="write the bound port here")
    ap.add_argument("--source", choices=["synthetic", "replay"], default="synthetic")
    ap.add_argument("--capture", default=None, help="capture file for --source replay")
    ap.add_argument("--speed", type=float, default=1.0, help="market time per real time; 0 = as fast as possible")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--step-ms", type=int, default=None)
    ap.add_argument("--loop", action="store_true", help="replay: start again at the end")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--drop-prob", type=float, default=0.0)
    ap.add_argument("--delay-jitter-ms", type=float, default=0.0,
                    help="Gaussian jitter of the delay (clipped 0..50 ms)")
    ap.add_argument("--jump-prob", type=float, default=0.0, help="synthetic: chance of a price jump per step")
    ap.add_argument("--jump-ticks", type=int, default=3, help="synthetic: a jump moves the book 1..N ticks")
    ap.add_argument("--disconnect-every-s", type=float, default=0.0,
                    help="cut every connection every N s (market time)")
    ap.add_argument("--gap-every-s", type=float, default=0.0, help="seq gap (seq steps back by 4) every N s (market time)")
    ap.add_argument("--bad-checksum-every-s", type=float, default=0.0,
                    help="a wrong checksum every N s (market time)")
    ap.add_argument("--itch-port", type=int, default=0,
                    help="also send a synthetic ITCH session over MoldUDP64 to this UDP port on 127.0.0.1")
    ap.add_argument("--itch-events", type=int, default=100_000)
    ap.add_argument("--itch-rate", type=float, default=10_000.0, help="ITCH messages a second (0 = as fast as possible)")
    return ap
