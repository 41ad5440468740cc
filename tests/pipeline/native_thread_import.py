"""A module that starts a native thread (not a Python one) when it is imported, as some C
extensions do (onnxruntime here): a fork server that preloads it must refuse to fork."""

from __future__ import annotations

import ctypes

_libc = ctypes.CDLL(None, use_errno=True)
_tid = ctypes.c_ulong()
if _libc.pthread_create(ctypes.byref(_tid), None, ctypes.cast(_libc.pause, ctypes.c_void_p), None) != 0:
    raise OSError(ctypes.get_errno(), "pthread_create failed")
