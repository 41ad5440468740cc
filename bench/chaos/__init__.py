"""Fault injection against the real pipeline: ``make chaos`` (``python -m bench.chaos``).

Each scenario runs the whole pipeline (the same graph and settings as ``bench.pipeline``: venue, feed,
features, fast, llm, risk, sender as real processes under the supervisor, in a private shm prefix and
run folder) under load, injects one kind of fault, and checks its pass criterion. Each scenario is a
function ``(ChaosPipeline-factory, quick: bool) -> Row``; ``bench.chaos.registry`` lists them in the
order they run. The same scenarios run as tests (``tests/chaos``, marked ``chaos``) with ``quick=True``.

Modules: ``harness`` (Row and the verdicts, ``ChaosPipeline``, the readers of what a run left),
``registry`` (the scenarios by group), ``__main__`` (the command line and the report); the config
rewrites (``rewrite``) and orders flowing and settling (``flow``) the scenarios share; the scenarios:
process and ring faults (``process``: SIGKILL, SIGSTOP, ring corruption; ``stall``: stalled consumers;
``outage``: the venue stopped and its feed faults), bad input and the slow path (``malformed``, ``input_guard``: rows outside the fast model's range,
``llm_faults`` with its p99 rule in ``p99_rule``, ``risk_limits``, ``kill_switch``, ``secrets_scan``),
the position against the venue (``position``: a full journal disk, a venue reset, a position
changed behind the back, a machine crash of the sender), and operating it (``latency_guard``: a stage
slowed on purpose trips the latency-budget guard).

Output: ``bench/results/<UTC>-chaos/report.md`` and ``results.json``: a table, scenario by scenario,
of what was injected, what the pipeline did, the measured figure, and the verdict: PASS, FAIL, or
INCONCLUSIVE (a criterion the machine could not resolve in this run, by a rule the scenario states
before any result: only ``llm_faults``'s p99 criterion has one; INCONCLUSIVE is never counted as a
pass); then, for each scenario that counts orders, its orders ledger run by run: the NEW orders the risk
gateway approved (its audit log) = journaled by the sender + refused by it (with the reasons) + lost
(``flow.new_orders_ledger``). Exit status: 0 when every scenario passed, 1 when any failed, 3 when none failed but some were
inconclusive.
"""
