"""The bridge between hosts: local rings joined to ZeroMQ sockets (issue #28).

``frames`` declares every wire frame once; ``mdsync`` (market data sequencing, snapshots, gaps) and
``aggregate`` (the shared risk gateway's shards, heartbeats and aggregate limits, and a shard's side
of it) are sans-I/O cores; ``curve`` holds the CurveZMQ keys; ``sockets`` is the thin zmq shell the
agents of ``procs.bridge`` drive.
"""
