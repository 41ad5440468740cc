"""Lock-free single-producer / single-consumer rings in POSIX shared memory.

Public API (nothing outside this package touches a segment's bytes):

- ``Ring.create(name, slot_size=, capacity=, full_policy=)`` / ``Ring.attach(name, ...)`` /
  ``Ring.unlink(name)`` / ``Ring.exists(name)`` / ``ring.stats()`` / ``ring.close()``
- ``ring.writer()`` -> ``Writer``: ``try_write``, ``write`` (full policy applied),
  ``try_write_batch``, ``write_batch``, ``try_claim`` + ``commit_claim`` (zero copy), ``heartbeat``
- ``ring.reader()`` -> ``Reader``: ``try_read``, ``try_read_batch``, ``poll``, ``commit``,
  ``wait`` (blocking), ``available``, ``heartbeat``
- idle strategies: ``YieldSpin`` (busy-spin), ``BusySpin``, ``BackOff``
- ``layout``: the binary layout, declared once.

Modules: ``layout`` (the bytes), ``slot`` (the codec names the hot paths bind), ``segment`` (create /
attach / unlink a segment and its wake-up semaphore; geometry checks; ``open_doorbell``), ``ring``
(``Ring``, ``RingStats``), ``writer`` (``Writer``), ``reader`` (``Reader``, ``Message``,
``wait_any``), ``idle``, ``errors``.
"""

from ringbuf.errors import PayloadTooLargeError, RingError, RingExistsError, RingLayoutError, RingNotFoundError
from ringbuf.idle import BackOff, BusySpin, IdleStrategy, YieldSpin, make_idle
from ringbuf.layout import slot_size_for
from ringbuf.reader import Message, Reader
from ringbuf.ring import Ring, RingStats
from ringbuf.segment import shm_name
from ringbuf.writer import Writer

__all__ = [
    "BackOff",
    "BusySpin",
    "IdleStrategy",
    "Message",
    "PayloadTooLargeError",
    "Reader",
    "Ring",
    "RingError",
    "RingExistsError",
    "RingLayoutError",
    "RingNotFoundError",
    "RingStats",
    "Writer",
    "YieldSpin",
    "make_idle",
    "shm_name",
    "slot_size_for",
]
