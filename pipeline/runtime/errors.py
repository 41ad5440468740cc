"""Exceptions of the pipeline package (control paths only; hot paths return codes)."""

from __future__ import annotations


class PipelineError(Exception):
    """Root of every exception the pipeline package raises."""


class ConfigError(PipelineError):
    """A configuration file was rejected; the message names the file and the field path."""


class StartupError(PipelineError):
    """The system cannot start as configured (GPU budget, stale run, missing agent class...)."""


class ControlError(PipelineError):
    """A control-plane request failed (no supervisor answering, unknown command or process)."""
