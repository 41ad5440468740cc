"""Strategy evaluation (issues #22, #30): a market replayed on simulated time through the stage code the
processes run, each variant's decisions matched against the replayed book, and the metrics.

- ``replay``: market sources as one stream of timestamped BOOK / TRADE payloads (the synthetic
  market, Bitget captures, an ITCH 5.0 file), bad input counted per reason;
- ``decisions``: the features of a market, computed once, and each variant's decision per row (an
  ONNX model under the fast stage's thresholds, or a rule);
- ``variants``: what a variant is (``NAME=key=value,...``), its checks, the fast stage's thresholds;
- ``exchange``: the simulated exchange (the paper venue's ``OrderEngine`` behind ORDER / EXEC_REPORT
  payloads, against the replayed book);
- ``simulator``: one variant's run (risk gateway, order latency, exchange, optional slow path, the
  quoting scenario's quotes) and its metrics;
- ``quoting``: the quoting scenario's resting bid and ask where the planner puts passive orders;
- ``slowpath``: the LLM hub in-process for the ``model+llm`` variant;
- ``metrics``: P&L, round trips, drawdown, Sharpe, IC and the verdicts (pure);
- ``markouts``: every fill's markout at 100 ms / 1 s / 5 s, and what the orders EMERGENCY cancels
  removed would have been as fills (pure);
- ``judgement``: the verdicts over several seeds, paired, by a rule fixed before the results (pure);
- ``harness``: one market's variants end to end (``bench.evaluate``'s per-variant step) and
  ``model_pnl``, the model report's call for P&L and markouts on one market;
- ``journal_report``: the same metrics from the order sender's journal of a paper-trading run.
"""
