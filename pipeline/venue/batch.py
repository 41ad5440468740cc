"""Batch place and batch cancel (Bitget v2 ``batch-orders`` / ``batch-cancel-order``) over an
``OrderEngine`` (``pipeline.venue.orders``): each entry placed or cancelled, in order, exactly as
its single request would be (same checks, same codes, same counters); a refused entry does not stop
the others. Sans-I/O."""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.venue.account_state import Order
from pipeline.venue.order_fields import CODE_PARAM_ERROR, OrderRejected

MAX_BATCH = 50  # entries in one batch (the exchange's orderList limit)

Refused = tuple[Mapping, OrderRejected]


def batch_entries(orders) -> list[Mapping]:
    """The entries of a batch: a list of 1..MAX_BATCH objects.

    Raises:
        OrderRejected: 40020 anything else.
    """
    if not isinstance(orders, list) or not 0 < len(orders) <= MAX_BATCH or \
            not all(isinstance(e, Mapping) for e in orders):
        raise OrderRejected(CODE_PARAM_ERROR, f"Parameter orderList error: 1..{MAX_BATCH} objects")
    return orders


def place_batch(engine, symbol, orders) -> tuple[list[Order], list[Refused]]:
    """Place each place-order body of ``orders`` with ``engine.place`` (an entry without a symbol
    takes ``symbol``), in order. Returns the placed orders and the refused entries.

    Raises:
        OrderRejected: 40020 ``orders`` not a list of 1..MAX_BATCH objects (nothing placed).
    """
    placed, refused = [], []
    for entry in batch_entries(orders):
        body = entry if entry.get("symbol") or symbol in (None, "") else {**entry, "symbol": symbol}
        try:
            placed.append(engine.place(body))
        except OrderRejected as exc:
            refused.append((entry, exc))
    return placed, refused


def cancel_batch(engine, symbol, orders) -> tuple[list[Order], list[Refused]]:
    """Cancel each entry of ``orders`` (orderId or clientOid; its symbol, else ``symbol``) with
    ``engine.cancel``, in order. Returns the cancelled orders and the refused entries.

    Raises:
        OrderRejected: 40020 ``orders`` not a list of 1..MAX_BATCH objects (nothing cancelled).
    """
    done, refused = [], []
    for entry in batch_entries(orders):
        try:
            done.append(engine.cancel(entry.get("symbol") or symbol, entry.get("orderId"), entry.get("clientOid")))
        except OrderRejected as exc:
            refused.append((entry, exc))
    return done, refused
