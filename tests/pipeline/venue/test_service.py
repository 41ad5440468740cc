"""``pipeline.venue.service``: stopping a service's task, and running a control call on a service's
loop from another thread. ``VenueThread`` itself runs in every server test."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pipeline.venue.service import call_on_loop, cancel_task


def test_cancel_task_ends_a_running_task_quietly_and_takes_none():
    async def main() -> bool:
        task = asyncio.create_task(asyncio.sleep(60))
        await asyncio.sleep(0)
        await cancel_task(task)
        ended = task.done() and task.cancelled()  # waited for, before cancel_task returned
        await cancel_task(task)  # an ended task: nothing raised
        await cancel_task(None)
        return ended

    assert asyncio.run(main())


def test_call_on_loop_runs_on_the_loop_from_another_thread_and_hands_back_result_or_error():
    loop = asyncio.new_event_loop()
    ran_on = []
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    try:
        def where(x: int, *, y: int) -> int:
            ran_on.append(threading.current_thread())
            return x + y

        assert call_on_loop(loop, 5.0, where, 1, y=2) == 3 and ran_on == [t]
        with pytest.raises(ZeroDivisionError):
            call_on_loop(loop, 5.0, lambda: 1 / 0)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()
    # a closed loop, or none yet (a service not started): called here and now
    assert call_on_loop(loop, 5.0, where, 2, y=2) == 4 and ran_on[-1] is threading.current_thread()
    assert call_on_loop(None, 5.0, where, 3, y=2) == 5
