"""Fixtures of the stage-process tests: the real-supervisor ``pipe`` fixture of the pipeline tests."""

from tests.pipeline.conftest import pipe  # noqa: F401  (re-exported fixture)
