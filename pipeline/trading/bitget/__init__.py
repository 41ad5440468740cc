"""Bitget v2 public WebSocket, sans-I/O: request builders, frame decoder, order books, capture files.

Nothing here touches a socket. A feed process owns the websockets client and calls, per frame::

    decoded = decoder.decode(text)                    # protocol.py; never raises
    if decoded.kind in (FrameKind.SNAPSHOT, FrameKind.UPDATE):
        if books.apply(decoded, book_buf) is Applied.EMITTED:
            ...publish book_buf as a BOOK payload
    elif decoded.kind is FrameKind.TRADE:
        n = books.fill_trades(decoded, trade_buf)     # n TRADE payloads of 40 bytes
    for sub in books.take_resyncs():                  # book invalidated: ask for a fresh snapshot
        for text in resync_messages(sub):             # unsubscribe, then subscribe
            ...send text

Modules:

- ``protocol``: the protocol's description and one import point (``make_decoder``), over
  ``frames`` (channels, limits, ``FrameKind`` and ``Reject`` codes, decoded values), ``requests``
  (subscribe / unsubscribe / resync / ping messages), ``values`` / ``depth`` / ``trades`` (validation),
  ``decoder`` (what both decoders share), ``msgspec_decoder`` and ``orjson_decoder``.
- ``errors``: ``BitgetError``, the one exception root of this package, and its subclasses.
- ``book``: the per-instrument books (``books`` snapshot + updates with CRC-32 checksum and seq
  checks; ``books1/5/15`` full snapshots), BOOK and TRADE payload filling, ``bitget_checksum``.
- ``capture``: the cryptofeed-style capture line format, reader and writer (record mode).
- ``session``: the feed's state machine (subscriptions, frames into books and BOOK / TRADE
  payloads, connection markers, resyncs under a throttle, counters), with its ports injected.
- ``pacing``: the connection's timing policies (reconnect back-off, resync throttle, send pacing).
- ``rest`` / ``signing``: the order REST API's requests and answers, and request signing.
"""

from pipeline.trading.bitget.book import Applied, BitgetBooks, BookState, bitget_checksum
from pipeline.trading.bitget.capture import CaptureLine, CaptureWriter, read_capture
from pipeline.trading.bitget.errors import BitgetError, CaptureError, FrameRejected
from pipeline.trading.bitget.frames import Decoded, FrameKind, Reject, Subscription
from pipeline.trading.bitget.msgspec_decoder import MsgspecDecoder
from pipeline.trading.bitget.orjson_decoder import OrjsonDecoder
from pipeline.trading.bitget.protocol import make_decoder
from pipeline.trading.bitget.requests import ping_message, resync_messages, subscribe_message, unsubscribe_message

__all__ = [
    "Applied", "BitgetBooks", "BitgetError", "BookState", "CaptureError", "CaptureLine", "CaptureWriter",
    "Decoded", "FrameKind", "FrameRejected", "MsgspecDecoder", "OrjsonDecoder", "Reject", "Subscription",
    "bitget_checksum", "make_decoder", "ping_message", "read_capture", "resync_messages", "subscribe_message",
    "unsubscribe_message",
]
