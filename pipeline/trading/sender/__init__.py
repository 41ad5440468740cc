"""The order sender's cores; ``procs.sender.SenderAgent`` is their shell (rings, sockets, clock).

One job a module:

- ``admission``: a NEW's duplicate check, validation and journaled intent (``NewOrderAdmission``);
- ``groupcommit``: the journal made durable by one fsync after the sends, within a bounded window
  (``GroupCommit``; or a batch's intents before any is sent);
- ``outbox``: commands waiting to start, in FIFO order (``Outbox``, ``OutboxItem``);
- ``inflight``: place / cancel requests in flight on the order connections (``InFlightRequests``);
- ``answers``: acting on their answers: retry, journal, report (``OrderAnswers``);
- ``lane``: request generators run one request at a time on their own connection (``Lane``);
- ``queries``: order queries, fill polls and the periodic poll; fills ingested (``VenueQueries``);
- ``reconcile``: start-up and periodic account / position checks, the state report (``Reconciler``);
- ``recovery``: at start, the orders the venue holds that the journal lost (``WindowRecovery``);
- ``ledger``: the journal and the order state replayed from it (``OrderLedger``);
- ``reports``: EXEC_REPORTs written without waiting for room (``ExecReporter``);
- ``client``: one request's exchange, transport failures classified and counted (``VenueClient``);
- ``connection``: the keep-alive HTTP connections, ``base_url`` parsing (``HttpTransport``);
- ``ratelimit``: the client-side token bucket and the retry back-off (``TokenBucket``).

A module imports from another only its data types, constants and pure functions (``OutboxItem``,
the lane's job kinds, ``backoff_ns``...); the cores that call each other are joined by the shell
(constructor arguments), not by imports, so there is no import cycle, and none imports the shell.
"""
