"""A module that starts a thread when it is imported: a fork server that preloads it must refuse
to fork (it would fork a process with threads) and the supervisor must exec the stages instead."""

from __future__ import annotations

import threading

from tests.support.agents import Relay

_never = threading.Event()
threading.Thread(target=_never.wait, name="started-at-import", daemon=True).start()

ThreadedImportRelay = Relay
