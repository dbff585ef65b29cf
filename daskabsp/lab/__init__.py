"""The lab: what tests, benchmarks and demos use to make and measure stragglers, never the
fits themselves (offline tools; each runs in the fitting process).

* :mod:`.stragglers`: workers slowed by emulation or by a CPU-bound neighbour;
* :mod:`.faults`: worker processes killed, stopped or slowed at the moments a fit's own events
  choose, and the invariants a fit must keep under them;
* :mod:`.datasets`: data whose shape makes stragglers (skewed sparse rows, rows in an order,
  text-like rows);
* :mod:`.sim`: a discrete-event simulator of rounds on clusters of any size, on the engine's
  own rules;
* :mod:`.demo`: ``python -m daskabsp demo``;
* :mod:`.netcluster`: a cluster with a real network on one machine (scheduler and workers in
  Linux network namespaces, links shaped with ``tc``), for tests and benchmarks of row moves.
"""
