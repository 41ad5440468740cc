"""What the tests share, one job a module:

- ``paths``: the repository root, /dev/shm, the shared data beside the repository.
- ``clock``: ``ManualClock``, the clock a test moves by hand.
- ``ports``: ring port and event log doubles (``ListInput``, ``RecordingPort``, ``ListLog``).
- ``configtext``: config text snippets (rings, processes, instruments, run/log dirs).
- ``context``: the ``AgentContext`` of a stage driven in-process.
- ``wait``: waiting with a deadline (``wait_until``, ``pump``, ``settle``).
- ``agents``: the small test agents configs name by ``tests.support.agents:Class``, and the readers
  of what their sinks write.
- ``shm``: /dev/shm entries by prefix or ring name, unique ring names (``RingNames``).
- ``processes``: child processes, a per-test pipeline under a real supervisor, and their cleanup.
- ``frames``: Bitget v2 frame builders and a reference book.
- ``wsserver``: a scripted WebSocket server standing in for the venue.
- ``venue``: the paper venue in a thread, its WebSocket client, a REST venue with a signed client.
- ``risk``: the risk core's instruments, limits, payload builders and a started gateway.
- ``sender``: the order sender's instruments, report recorder and journal records.
- ``llm``: the generated tiny GGUF model of the LLM tests.

Nothing here is imported by this package itself: a child process that loads ``tests.support.agents``
loads only what that module needs.
"""
