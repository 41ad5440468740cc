"""Exceptions of the paper venue (control paths only: construction, configuration, capture loading).

The per-tick code never raises for market data: the market core returns ``None`` for an update it
cannot apply, and the server answers a bad client request with the venue's error event.

Hierarchy (every class is a ``pipeline.runtime.errors.PipelineError``)::

    VenueError                   bad venue parameters (instruments, speed, fault values, ...)
    +-- VenueConfigError         a bad or unknown venue param (also a ConfigError: not retried)
    +-- ReplayError              a capture cannot be read or holds a malformed books / trade frame
"""

from __future__ import annotations

from pipeline.runtime.errors import ConfigError, PipelineError


class VenueError(PipelineError):
    """Root of every exception the paper venue raises."""


class VenueConfigError(VenueError, ConfigError):
    """A bad or unknown venue param: a configuration error, so the stage's start fails at once and is
    not retried (``pipeline.runtime.runner``: ConfigError at start)."""


class ReplayError(VenueError):
    """A capture file cannot be replayed (unreadable, malformed frame, nothing to serve)."""
