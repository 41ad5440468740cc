"""NASDAQ TotalView-ITCH 5.0, sans I/O: messages, framing, vectorized decode, L3 book, synthetic sessions.

- ``messages``: the 23 message layouts (declared once), records, ``decode`` / ``try_decode`` /
  ``Decoder`` / ``encode``.
- ``framing``: BinaryFILE (``iter_frames``, ``scan_frames``, ``encode_binaryfile``; gzip for .gz
  paths) and MoldUDP64 (``encode_packet``, ``decode_packet``, ``MoldSequencer``).
- ``vectorized``: ``decode_buffer`` (numpy, per-type structured arrays) and the per-message
  baselines.
- ``book``: ``L3Book`` (order-by-order book, aggregated levels, BOOK payloads).
- ``executions``: ``ExecutionBook``, the ``L3Book`` that also reports every execution (E, printable C,
  and P, the non-displayed ones, flagged hidden) as a TRADE payload through an injected ``on_trade``.
- ``recovery``: MoldUDP64 gap recovery (in-order release, bounded re-requests, give-up bounds).
- ``ingest``: the feed's ingestion (a BinaryFILE replay, paced or not; MoldUDP64 datagrams) into
  the book, BOOK payloads out through an injected emit.
- ``synth``: deterministic consistent sessions (``generate_session``).
- ``errors``: ``ItchError`` and its subclasses.
"""

from pipeline.trading.itch.book import BookEvent, L3Book
from pipeline.trading.itch.errors import ItchError
from pipeline.trading.itch.framing import MoldSequencer, iter_frames
from pipeline.trading.itch.messages import Decoder, DecodeReason, decode, encode, try_decode

__all__ = [
    "BookEvent", "Decoder", "DecodeReason", "ItchError", "L3Book", "MoldSequencer",
    "decode", "encode", "iter_frames", "try_decode",
]
