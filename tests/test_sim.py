"""The simulator's bookkeeping (daskabsp.lab.sim): every row counted at most once per round and
exactly once per cycle, time that only moves forward, SSP's staleness bound; a 1 000-worker
simulation that completes; and the simulator making the engine's decisions with the engine's
own functions (imported, never copied)."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import daskabsp
from daskabsp import ABSP, ASP, BSP, SSP
from daskabsp.engine.helpers import HelperPhase
from daskabsp.lab import sim
from daskabsp.lab.sim import (
    Cluster,
    Costs,
    HeavyTail,
    Persistent,
    SimResult,
    Stragglers,
    Transient,
    simulate,
)

MODES = ["plain", BSP(), ABSP(), ABSP.published(), ABSP(count="partitions"),
         ABSP(quorum=2), SSP(0), SSP(2), ASP()]


def check_rows(res: SimResult) -> None:
    """Rounds count each partition's rows from its cursor, at most its size, each partition
    at most once; over the rounds no row is counted twice before every row of its partition
    is counted once; BSP and plain rounds count every row."""
    cl = res.cluster
    counts = np.zeros((cl.partitions, cl.rows), dtype=np.int64)
    cursor = [0] * cl.partitions
    for r in res.rounds:
        parts = [p for p, _, _ in r.counted]
        assert len(parts) == len(set(parts))
        if res.mode in ("plain", "bsp"):
            assert sorted(parts) == list(range(cl.partitions))
        for p, start, rows in r.counted:
            assert start == cursor[p]
            assert 0 < rows <= cl.rows
            if res.mode in ("plain", "bsp") or res.mode.startswith(("ssp", "asp")):
                assert rows == cl.rows
            counts[p, (start + np.arange(rows)) % cl.rows] += 1
            cursor[p] = (start + rows) % cl.rows
            assert counts[p].max() - counts[p].min() <= 1


def check_time(res: SimResult) -> None:
    """Events in time order; each round (update) ends after it starts; global rounds one
    after the other; a task starts after its submission and ends after its start."""
    times = [e[0] for e in res.events]
    assert times == sorted(times)
    assert all(r.start <= r.end for r in res.rounds)
    ends = [r.end for r in res.rounds]
    assert ends == sorted(ends)
    if not res.mode.startswith(("ssp", "asp")):
        for a, b in zip(res.rounds, res.rounds[1:], strict=False):
            assert a.end <= b.start
        seen: dict = {}
        for t, what, r, p in res.events:
            if what in ("submit", "start", "end"):
                seen.setdefault((r, p), []).append((what, t))
        for steps in seen.values():
            assert [w for w, _ in steps] == ["submit", "start", "end"][:len(steps)]


def check_staleness(res: SimResult, bound: int | None) -> None:
    """Under SSP no partition starts a clock more than ``bound`` clocks ahead of the slowest
    partition's applied updates."""
    if bound is None:
        return
    n = res.cluster.partitions
    clock = [0] * n
    for r in res.rounds:  # in the order applied
        (p, _, _), = r.counted
        done_before = [0] * n
        for u in res.rounds:
            if u.end <= r.start:
                done_before[u.counted[0][0]] += 1
        assert clock[p] <= min(done_before) + bound
        clock[p] += 1


@st.composite
def cases(draw):
    cluster = Cluster(workers=draw(st.integers(1, 5)), rows=draw(st.integers(1, 400)),
                      partitions_per_worker=draw(st.integers(1, 3)),
                      threads=draw(st.integers(1, 2)),
                      shared_cores=draw(st.sampled_from([None, 1, 2])))
    f = st.floats(1e-5, 5e-3)
    costs = Costs(loop_task=draw(f), loop_round=draw(f), engine_task=draw(f),
                  engine_round=draw(f), update=draw(f), stop_message=draw(f),
                  worker_task=draw(f), latency=draw(f), stop_latency=draw(f),
                  row_seconds=draw(st.floats(1e-7, 1e-4)), chunk_target=draw(f),
                  copy_bandwidth=draw(st.floats(1e4, 1e9)), help_above=draw(f),
                  probe_rows=draw(st.integers(1, 300)))
    stragglers = draw(st.sampled_from([
        Stragglers(), Persistent(0.3, 4.0), Transient(0.3, 5.0), HeavyTail(1.5)]))
    return cluster, costs, stragglers, draw(st.sampled_from(MODES)), draw(st.integers(0, 9))


@settings(max_examples=150, deadline=None)
@given(cases(), st.integers(1, 8))
def test_every_row_counted_once_per_round_and_time_moves_forward(case, rounds):
    cluster, costs, stragglers, mode, seed = case
    res = simulate(mode, cluster, costs, stragglers, rounds=rounds, seed=seed, log=True)
    assert res.rounds
    check_rows(res)
    check_time(res)
    if not isinstance(mode, str) and not mode.rounds:
        check_staleness(res, mode.staleness_bound)
    assert res.loop_busy > 0


def test_a_thousand_workers():
    """A 1 000-worker A-BSP fit (helpers from copies, transient stragglers) and its BSP
    baseline complete with their bookkeeping intact (kept small: a few seconds)."""
    cluster = Cluster(workers=1000, rows=2000)
    costs = Costs(row_seconds=1e-4)
    for mode in (ABSP(), BSP()):
        res = simulate(mode, cluster, costs, Transient(0.05, 4.0), rounds=6, log=True)
        assert len(res.rounds) == 6
        check_rows(res)
        check_time(res)
    assert res.rounds[-1].rows == cluster.partitions * cluster.rows


def test_stragglers_are_deterministic_and_slow():
    for s in (Persistent(0.1, 3.0), Transient(0.2, 4.0), HeavyTail(2.0)):
        a, b = s.factors(3, 7, 500), s.factors(3, 7, 500)
        assert np.array_equal(a, b)
        assert (a >= 1).all() and (a > 1).any()
    assert (Stragglers().factors(0, 0, 10) == 1).all()


def test_a_bsp_gains_over_bsp_with_a_persistent_straggler():
    """One worker in four 4x slower: BSP's epoch takes about 4 fast rounds, A-BSP's far
    less (a sanity check of the model, not of the engine)."""
    cluster = Cluster(workers=4, rows=20_000)
    costs = Costs(row_seconds=5e-6)
    bsp = simulate(BSP(), cluster, costs, Persistent(0.25, 4.0), rounds=12)
    absp = simulate(ABSP.published(), cluster, costs, Persistent(0.25, 4.0), rounds=12)
    assert absp.time_per_epoch(after=1) < 0.6 * bsp.time_per_epoch(after=1)


def test_mode_must_be_known():
    with pytest.raises(ValueError, match="'mode' parameter of simulate"):
        simulate("ssp", Cluster(workers=2, rows=10))


# -- the engine's rules, not a copy of them ----------------------------------------------------

SIM = Path(sim.__file__)
#: What sim.py must import from the engine: the decisions it makes, by the engine's code.
ENGINE_RULES = {
    "daskabsp.engine.helpers": {"shortfall", "leftovers_of", "helper_batches", "copies_due",
                                "copy_targets", "merge_helped"},
    "daskabsp.engine.link": {"idle_result"},
    "daskabsp.engine.clocks": {"within_bound"},
    "daskabsp.engine.plan": {"plan_round", "settle"},
    "daskabsp.policies": {"advance"},
}
#: The copies sim.py once kept, and rules of the engine it must not define again.
COPIES = {"_idle", "_leftovers", "_worth_it", "_merge", "_copy_target", "leftovers",
          "worth_it", "merge", "plan", "batches", "deadline", "ready", "advance",
          "within_bound", "idle_result", "shortfall", "leftovers_of", "worth_helping",
          "helper_batches", "copies_due", "copy_targets", "merge_helped", "wave_deadline"}


def test_the_simulator_imports_the_engines_rules_and_defines_none_of_them():
    """sim.py takes the helper phase's rules, the idle result, the staleness bound and the
    cursor arithmetic from the engine; it defines none of them (nor the copies it once
    kept), writes no cursor wrap ``(a + b) % n`` of its own, and names no class as another
    module of daskabsp does (one name per concept)."""
    tree = ast.parse(SIM.read_text())
    imported: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = "daskabsp.lab".rsplit(".", node.level - 1)[0]
            module = f"{base}.{node.module}" if node.module else base
            imported.setdefault(module, set()).update(a.name for a in node.names)
    for module, names in ENGINE_RULES.items():
        assert names <= imported.get(module, set()), (module, names - imported.get(module, set()))
    defined = {n.name for n in ast.walk(tree)
               if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    assert not defined & COPIES
    wraps = [ast.unparse(n) for n in ast.walk(tree)
             if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
             and isinstance(n.left, ast.BinOp) and isinstance(n.left.op, ast.Add)]
    assert not wraps
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    for path in Path(daskabsp.__file__).parent.rglob("*.py"):
        if path != SIM:
            others = {n.name for n in ast.walk(ast.parse(path.read_text()))
                      if isinstance(n, ast.ClassDef)}
            assert not classes & others, (path, classes & others)


class _Placement:
    """The placement HelperPhase sees, from a simulation's state: owners, copies made,
    copies being made; the copies it starts are recorded."""

    def __init__(self, rs: sim.RoundSim) -> None:
        self.owner = list(rs.owner_names)
        self._holders = [dict.fromkeys(rs._holders(p)) for p in range(len(rs.owner))]
        self._copying = set(rs.copying)
        self._load = dict(rs.copies_on)
        self.started: dict[int, str] = {}
        self.copy_room: dict[str, float] = {}  # the simulated workers have no memory bound
        self.nbytes: list[int] = []

    def copy_load(self) -> dict[str, int]:
        return self._load

    def holders(self, p: int) -> dict:
        return self._holders[p]

    def copying(self, p: int) -> bool:
        return p in self._copying

    def copy(self, p: int, worker: str) -> None:
        self.started[p] = worker


# Persistent stragglers with two partitions a worker: copies and waves every round; a heavy
# tail with a help-above of a scan's length: some rounds' leftovers not worth a wave (without
# patience: with it, a tail of 2x is mostly waited for, and few rounds have leftovers).
@pytest.mark.parametrize("stragglers, partitions_per_worker, help_above, policy",
                         [(Persistent(0.25, 4.0), 2, 2e-3, ABSP()),
                          (HeavyTail(2.0), 1, 5e-2, ABSP(patience=0.0))])
def test_the_simulators_helper_decisions_are_the_engines(monkeypatch, stragglers,
                                                         partitions_per_worker, help_above,
                                                         policy):
    """Round by round of a simulated default A-BSP fit on 16 workers, the engine's
    HelperPhase, given the simulation's state as its placement and the simulation's costs
    as its settings, starts the copies the simulator starts and plans the helper wave the
    simulator runs."""
    costs = Costs(row_seconds=1e-5, copy_bandwidth=5e7, help_above=help_above)
    settings = {"daskabsp.replicas": costs.replicas, "daskabsp.help-above": costs.help_above,
                "daskabsp.probe-rows": costs.probe_rows}
    real_help, real_pieces, real_copy = (sim.RoundSim._help, sim.RoundSim._pieces_task,
                                         sim.RoundSim._copy)
    seen = []

    def help_(self, r, plan, owned):
        # The engine's phase, from the state the simulation's phase starts from.
        placement, book = _Placement(self), copy.deepcopy(self.book)
        phase = HelperPhase(len(owned), self.rent_due, costs.chunk_target, sum)
        phase.rates = copy.deepcopy(self.rates)
        self.started, self.waves = {}, []
        out = yield from real_help(self, r, plan, owned)
        wave = []
        if plan.copies:
            with dask.config.set(settings):
                phase.observe(owned)
                phase.copy_stragglers(placement, owned, plan.quotas, self.threads, set())
                if plan.helped:
                    wave = phase.wave(placement, book, owned, plan.quotas, self.threads,
                                      set(), needed=plan.full)
        assert self.started == placement.started
        assert self.waves == [(w, list(batch)) for w, batch in wave]
        seen.append((len(self.started), len(wave)))
        return out

    def pieces(self, r, worker, batch):
        self.waves.append((worker, list(batch)))
        return real_pieces(self, r, worker, batch)

    def copy_(self, p, worker):
        self.started[p] = worker
        return real_copy(self, p, worker)

    monkeypatch.setattr(sim.RoundSim, "_help", help_)
    monkeypatch.setattr(sim.RoundSim, "_pieces_task", pieces)
    monkeypatch.setattr(sim.RoundSim, "_copy", copy_)
    cluster = Cluster(workers=16, rows=4000, partitions_per_worker=partitions_per_worker)
    res = simulate(policy, cluster, costs, stragglers, rounds=12, seed=3)
    assert len(res.rounds) == len(seen) == 12
    assert sum(c for c, _ in seen) > 0 and sum(w > 0 for _, w in seen) > 2
