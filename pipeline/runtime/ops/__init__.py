"""The ops server: what an operator and a monitoring system see of a running pipeline, served by the
supervisor on 127.0.0.1 (``[supervisor] ops_port``, 0 = off).

One module per job:

- ``snapshot``: one read of the pipeline (the supervisor's status, every ring's counters, CPU from /proc);
- ``metrics``: a snapshot as Prometheus metric families (``/metrics``, through prometheus-client);
- ``health``: a snapshot as 200 / 503 and why (``/health``);
- ``dashboard``: the live page's document (graph, stages, rings, positions, risk, breaker, denials);
- ``audit``: the newest denials, from the tail of the risk gateway's audit log;
- ``web``: the HTTP rules, sans-I/O (routes, loopback / Host / Origin checks, the operator token);
- ``tokenfile``: the operator token file (0600; ``python -m pipeline.runtime.ops.tokenfile PATH``);
- ``server``: the asyncio thread that serves all of it (``OpsServer``, ``start_ops_server``);
- ``static/``: the page, its script and its style (no build step, nothing from a CDN).

The supervisor imports ``server.start_ops_server``; nothing is imported here, so ``tokenfile`` runs
(``make setup``) without loading the server.
"""
