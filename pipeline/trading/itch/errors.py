"""Exceptions of the ITCH 5.0 core (control paths only).

Hot paths never raise: ``messages.try_decode`` / ``messages.Decoder`` return None with a
``DecodeReason``, ``framing.try_decode_packet`` returns a ``MoldReason``, ``book.L3Book.apply``
counts a ``BookEvent``. The raising functions below are for tools, tests and start-up code.

Hierarchy (every class is an ``ItchError``, itself a ``pipeline.runtime.errors.PipelineError``)::

    ItchError
    +-- DecodeError                  one ITCH message could not be decoded
    |   +-- UnknownMessageType       the type byte is not one of the 23 of ITCH 5.0
    |   +-- WrongMessageLength       the framed length differs from the type's fixed length
    |   +-- TruncatedMessage         fewer bytes than the type's length remain in the buffer
    +-- EncodeError                  a record cannot be encoded (value out of range, wrong type)
    +-- FramingError                 BinaryFILE / MoldUDP64 framing is broken
    |   +-- TruncatedFrame           the data ends inside a length prefix or a message
    |   +-- IncompleteSession        the data ends without the 0-length end-of-session marker
    +-- BookError                    a control-path request to the book is invalid
"""

from __future__ import annotations

from pipeline.runtime.errors import PipelineError


class ItchError(PipelineError):
    """Root of every exception the ITCH core raises."""


class _ErrorAt(ItchError):
    """An error at ``offset`` (bytes) in the data; ``DecodeError`` and ``FramingError`` are ones."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class DecodeError(_ErrorAt):
    """One ITCH message could not be decoded; ``offset`` is where it starts in the buffer."""


class UnknownMessageType(DecodeError):
    """The type byte is not one of the 23 ITCH 5.0 message types."""


class WrongMessageLength(DecodeError):
    """The frame's length differs from the fixed length of the message type."""


class TruncatedMessage(DecodeError):
    """The buffer ends before the message does."""


class EncodeError(ItchError):
    """A record cannot be encoded: a value is out of range, of the wrong type or too long."""


class FramingError(_ErrorAt):
    """BinaryFILE or MoldUDP64 framing is broken; ``offset`` is where in the data."""


class TruncatedFrame(FramingError):
    """The data ends inside a length prefix or inside the message it announces."""


class IncompleteSession(FramingError):
    """A BinaryFILE ends on a frame boundary but without the 0-length end-of-session marker."""


class BookError(ItchError):
    """A control-path request to the book names something it does not know."""
