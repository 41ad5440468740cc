"""Exceptions of the Bitget core (control paths only).

Hot paths never raise: ``Decoder.decode`` returns a ``Decoded`` with a ``Reject`` reason,
``BitgetBooks.apply`` returns an ``Applied`` code, ``BitgetBooks.fill_trades`` a count. The raising
functions (request builders, ``decode_or_raise``, constructors, the capture reader and writer) are
for tools, tests, start-up and the feed's control plane.

Hierarchy (every class is a ``BitgetError``, itself a ``pipeline.runtime.errors.PipelineError``)::

    BitgetError                  a bad request, instrument map or decoder name
    +-- FrameRejected            decode_or_raise refused a frame; ``.reason`` is the Reject code
    +-- CaptureError             a capture line is malformed, or an event cannot be written
"""

from __future__ import annotations

from pipeline.runtime.errors import PipelineError


class BitgetError(PipelineError):
    """Root of every exception the Bitget core raises."""


class FrameRejected(BitgetError):
    """A frame was rejected by ``decode_or_raise``; ``reason`` is the ``protocol.Reject`` code."""

    def __init__(self, reason, detail: str = "") -> None:
        super().__init__(f"{reason.name}: {detail}" if detail else reason.name)
        self.reason = reason
        self.detail = detail


class CaptureError(BitgetError):
    """A capture line is malformed, or a record cannot be written in the line format."""
