"""The clock book of a fit without global rounds (SSP, ASP): pure, no Dask.

Each partition has a **clock**: the number of its updates applied so far. A partition's task
computes its next update, the one of its current clock, from the parameters of a
**version** (the number of updates applied, by every partition, when its task was
submitted). Under SSP with bound ``s`` a partition may start the update of clock ``c`` only
while ``c - min(clocks) <= s`` (Bösen's rule: no partition computes more than ``s`` clocks
ahead of the slowest); ASP has no bound.

A submitted task holds a :class:`Lease` on ``(partition, clock, attempt)``. Its result is an
update only if the lease is still the partition's current one: a task given up on (its
worker lost or frozen) loses its lease, its partition is submitted again under the next
attempt, and whatever the old task returns later is never applied, so an update is neither
lost nor counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass


def within_bound(clock: int, slowest: int, bound: int | None) -> bool:
    """Whether a partition at ``clock`` may start its update while the slowest partition is
    at ``slowest``: at most ``bound`` clocks ahead of it (Bösen's rule; None: no bound,
    ASP)."""
    return bound is None or clock - slowest <= bound


@dataclass(frozen=True, slots=True)
class Lease:
    """A task's claim to compute one update.

    Attributes
    ----------
    partition : int
        The partition.
    clock : int
        The update it computes (its partition's clock when it was submitted).
    attempt : int
        0, or the resubmission after a task of the same clock was given up on.
    version : int
        Updates applied when it was submitted: the parameters it computes at.
    lead : int
        ``clock`` minus the slowest partition's clock when it was submitted.
    """

    partition: int
    clock: int
    attempt: int
    version: int
    lead: int


@dataclass(frozen=True, slots=True)
class Update:
    """An applied update.

    Attributes
    ----------
    lease : Lease
        The lease of the task that computed it.
    applied : int
        Its place in the order of updates (the version it creates, minus one).
    """

    lease: Lease
    applied: int

    @property
    def staleness(self) -> int:
        """Updates applied between its task's parameters and itself (Zhang et al. 2016's
        staleness)."""
        return self.applied - self.lease.version


class ClockBook:
    """Clocks, leases and the staleness bound of one fit.

    Parameters
    ----------
    n_partitions : int
        Partitions.
    bound : int or None
        Clocks a partition may compute ahead of the slowest (None: no bound, ASP).
    budget : int or None
        Most updates of the fit (None: no limit).
    """

    def __init__(self, n_partitions: int, bound: int | None, budget: int | None = None) -> None:
        if n_partitions < 1:
            raise ValueError(f"n_partitions must be at least 1, got {n_partitions}.")
        self.bound = bound
        self.budget = budget
        self.clocks = [0] * n_partitions
        self.version = 0
        self.running: dict[int, Lease] = {}
        self._attempts = [0] * n_partitions

    def __len__(self) -> int:
        return len(self.clocks)

    @property
    def slowest(self) -> int:
        """The smallest clock."""
        return min(self.clocks)

    def _left(self) -> int | None:
        return None if self.budget is None else self.budget - self.version - len(self.running)

    def ready(self) -> list[int]:
        """The partitions that may be submitted now, slowest first: not running, within the
        bound, and within the budget."""
        slowest = self.slowest
        free = [p for p in range(len(self)) if p not in self.running
                and within_bound(self.clocks[p], slowest, self.bound)]
        free.sort(key=lambda p: (self.clocks[p], p))
        left = self._left()
        return free if left is None else free[:max(left, 0)]

    def start(self, p: int) -> Lease:
        """Submit partition ``p`` (which must be :meth:`ready`): its lease."""
        if p not in self.ready():
            raise ValueError(f"partition {p} is not ready (clocks {self.clocks}, running "
                             f"{sorted(self.running)}, bound {self.bound}).")
        lease = Lease(p, self.clocks[p], self._attempts[p], self.version,
                      self.clocks[p] - self.slowest)
        self.running[p] = lease
        return lease

    def finish(self, lease: Lease) -> Update | None:
        """The result of ``lease``'s task came back: the update it makes, or None if the
        lease is no longer current (given up on, or already applied)."""
        if self.running.get(lease.partition) != lease:
            return None
        del self.running[lease.partition]
        self.clocks[lease.partition] += 1
        self._attempts[lease.partition] = 0
        self.version += 1
        return Update(lease, self.version - 1)

    def give_up(self, lease: Lease) -> bool:
        """Revoke ``lease`` (its task's worker was lost or went silent): the partition is
        ready again, under the next attempt. False if the lease was not current."""
        if self.running.get(lease.partition) != lease:
            return False
        del self.running[lease.partition]
        self._attempts[lease.partition] += 1
        return True

    def clocks_run(self) -> int:
        """Updates applied per partition, rounded up: the fit's rounds' worth of work."""
        return -(-self.version // len(self))
