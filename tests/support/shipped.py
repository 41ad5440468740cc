"""A shipped config (``configs/<name>``) turned into a test pipeline's config: the test's own shm
prefix, run and log folders and no ops port, plus the test's replacements, each of which must still
be in the file (a config that drifted from its test fails here, naming what is gone)."""

from __future__ import annotations

from pipeline.runtime.config import load_config
from tests.support.paths import REPO_ROOT


def use_shipped_config(pipe, name: str, prefix: str, run_dir: str, log_dir: str, *extra: tuple[str, str]) -> None:
    """Write ``configs/<name>`` with ``shm_prefix = "<prefix>"``, ``run_dir = "<run_dir>"``,
    ``log_dir = "<log_dir>"`` (as the file has them) made the ``pipe`` fixture's, ``ops_port = 0`` and
    the ``extra`` (old, new) replacements, and make it ``pipe``'s config.

    Raises:
        AssertionError: a text to replace is not in the file.
    """
    text = (REPO_ROOT / "configs" / name).read_text()
    for old, new in ((f'shm_prefix = "{prefix}"', f'shm_prefix = "{pipe.prefix}"'),
                     (f'run_dir = "{run_dir}"', f'run_dir = "{pipe.run_dir}"'),
                     (f'log_dir = "{log_dir}"', f'log_dir = "{pipe.log_dir}"'),
                     ("ops_port = 8790", "ops_port = 0"), *extra):
        assert old in text, f"configs/{name} no longer has {old!r}"
        text = text.replace(old, new)
    path = pipe.tmp / name
    path.write_text(text)
    pipe.paths.append(path)
    pipe.cfg_path, pipe.cfg = path, load_config(path)
