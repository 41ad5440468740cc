"""Exceptions of the ring package. Control paths raise these; hot paths return codes instead."""

from __future__ import annotations


class RingError(Exception):
    """Root of every exception raised by ringbuf."""


class RingExistsError(RingError):
    """A segment with this name already exists and the caller did not ask to replace it."""


class RingNotFoundError(RingError):
    """No segment with this name exists (the supervisor creates rings; stages only attach)."""


class RingLayoutError(RingError):
    """The segment's magic, layout version or geometry differs from what the caller expects.

    The message names the segment and every field that differs.
    """


class PayloadTooLargeError(RingError):
    """A payload does not fit the ring's slot (a programming error, not a market event)."""
