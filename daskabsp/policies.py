"""Synchronisation policies: when a round ends and what is kept of the stragglers' work.

Policies are decisions only; they know nothing of Dask. The driver asks a policy how many
finished partitions end a round (:meth:`round_quorum`), whether the partial statistics of the
partitions that were stopped count (:attr:`keep_partial`), and where a partition resumes
(:func:`advance`: the cursor rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

_CURSORS = ("resume", "restart")


def advance(cursor: int, rows: int, n: int) -> int:
    """The cursor of a partition of ``n`` rows after ``rows`` rows from ``cursor``.

    A partition is scanned cyclically: a round starts at its cursor, takes up to its quota of
    rows, wrapping from the last row to row 0, and the next round starts where the last one
    stopped. Rows a straggler did not reach are therefore the first rows of its next round,
    and every row is visited once per cycle, in order.
    """
    return (cursor + rows) % n if n else 0


@dataclass(frozen=True)
class Policy:
    """Base class of the synchronisation policies.

    Examples
    --------
    >>> import daskabsp
    >>> daskabsp.SYNC_NAMES                         # the names sync= takes
    ('bsp', 'absp', 'ssp', 'asp')
    >>> all(isinstance(p, daskabsp.Policy)
    ...     for p in (daskabsp.BSP(), daskabsp.ABSP(), daskabsp.SSP(), daskabsp.ASP()))
    True
    >>> daskabsp.ABSP(quorum=2).round_quorum(n_partitions=4)   # workers that end a round
    2
    """

    name: ClassVar[str] = "policy"
    #: Whether the policy runs global rounds (BSP, A-BSP: :class:`~daskabsp.engine.loop.
    #: RoundLoop`) or a clock per partition (SSP, ASP: :class:`~daskabsp.engine.clock_loop.
    #: ClockLoop`).
    rounds: ClassVar[bool] = True
    # Subclasses declare a field ``cursor: Literal["resume", "restart"]``.

    def __post_init__(self) -> None:
        if self.cursor not in _CURSORS:
            raise ValueError(
                f"The 'cursor' parameter of {type(self).__name__} must be a str among "
                f"{set(_CURSORS)}. Got {self.cursor!r} instead."
            )

    def round_quorum(self, n_partitions: int) -> int:
        """Number of partitions (or workers, see :attr:`quorum_unit`) that must finish their
        quota to end a round."""
        return n_partitions

    @property
    def quorum_unit(self) -> str:
        """What the quorum counts: finished ``"partitions"``, or ``"workers"`` that finished
        every partition they were given."""
        return "partitions"

    @property
    def grace(self) -> float:
        """Share of its quota a stopped partition may still finish (it then ignores the
        stop): the rows it would leave are not worth a partial round."""
        return 0.0

    @property
    def patience(self) -> float:
        """How long a round with no known straggler waits past its quorum before it stops
        the rest, as a share of the quorum's time (0: stop at once)."""
        return 0.0

    @property
    def keep_partial(self) -> bool:
        """Whether the statistics of a partition stopped before its quota are used."""
        return True

    @property
    def stops(self) -> bool:
        """Whether this policy may stop partitions before their quota."""
        return False

    @property
    def helped(self) -> bool:
        """Whether the rows stopped partitions leave are shared among the other workers in
        the same round (see :class:`ABSP`'s ``helpers``)."""
        return False

    def next_cursor(self, cursor: int, rows: int, n: int, *, finished: bool) -> int:
        """Where a partition of ``n`` rows starts next round after processing ``rows`` rows.

        ``finished`` tells whether the partition completed its quota.
        """
        if self.cursor == "restart":
            return 0
        if not finished and not self.keep_partial:
            return cursor
        return advance(cursor, rows, n)

    def check(self, n_partitions: int) -> None:
        """Raise ``ValueError`` if the policy cannot run over ``n_partitions`` partitions."""

    def check_quota(self, quota, owner: str = "fit", sync=None) -> None:
        """Raise ``ValueError`` if ``quota`` (rows per round) cannot go with this policy: a
        policy without rounds (SSP, ASP) replaces a partition's whole statistics with each
        update, so only None is allowed. ``sync``: how the caller named the policy (default:
        the policy itself)."""
        if quota is not None and not self.rounds:
            raise ValueError(
                f"The 'quota' parameter of {owner} must be None with "
                f"sync={self if sync is None else sync!r} (each of its updates replaces a "
                f"partition's whole statistics; use more partitions for smaller updates). "
                f"Got {quota!r} instead.")

    @property
    def staleness_bound(self) -> int | None:
        """Clocks a partition may run ahead of the slowest one (policies without global
        rounds; None: no bound)."""
        return None


@dataclass(frozen=True)
class BSP(Policy):
    """Bulk synchronous parallel: every round waits for every partition.

    Parameters
    ----------
    cursor : {"resume", "restart"}, default="resume"
        Where a partition starts its next round. Under BSP every partition processes its whole
        quota, so this only matters with a quota smaller than the partition.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> from daskabsp.estimators import LogisticRegression
    >>> clf = LogisticRegression(sync=daskabsp.BSP()).fit(X, y)   # as sync="bsp"
    >>> bool(clf.history_.harvested.any())      # no partition is ever stopped
    False
    >>> clf.history_.attrs["sync"]
    'bsp'
    """

    name: ClassVar[str] = "bsp"
    cursor: Literal["resume", "restart"] = "resume"


@dataclass(frozen=True)
class ABSP(Policy):
    """A-BSP: end a round with a straggler when the fastest worker (or partition) finishes.

    When ``quorum`` workers (or partitions, ``count="partitions"``) have processed their quota
    and a worker is known to straggle, every other partition of the round is told to stop; a
    round whose workers are balanced is not cut at its quorum (see ``patience``), and
    ``ABSP.published()`` stops every round at its first partition's finish, as published. A
    running partition stops at its next chunk boundary and returns its statistics over the rows
    it processed; a partition that has not started returns 0 rows at once. Stopped partitions
    resume from their first unprocessed row next round.

    Parameters
    ----------
    quorum : int, default=1
        How many must finish to end the round (k-of-n): workers that finished every
        partition they were given (``count="workers"``), or partitions. ``quorum=1`` is
        A-BSP proper; a quorum equal to their number behaves as BSP.
    on_quorum : {"harvest", "drop"}, default="harvest"
        What happens to the work of stopped partitions: ``"harvest"`` counts their partial
        statistics; ``"drop"`` discards them and leaves their cursor where it was (the ablation
        that shows what harvesting buys, as backup workers do).
    cursor : {"resume", "restart"}, default="resume"
        ``"resume"`` starts a stopped partition at its first unprocessed row (unprocessed data is
        prioritised); ``"restart"`` starts every partition at row 0 each round (ablation).
    helpers : bool, default=True
        Once the round is stopped, share the rows the stopped partitions left of their quota
        among the other workers holding a copy of them (``daskabsp.replicas`` copies, made
        once the waits on a partition's worker have paid for one), in proportion to the speed
        each showed in the round, and count them in the same round: the round covers every
        row at the speed of the workers that are fast, and a silent worker's partitions are
        scanned from their copies. Rows no other worker holds are counted next round, as
        published. Only with ``on_quorum="harvest"`` and ``cursor="resume"``.
    count : {"workers", "partitions"}, default="workers"
        What the quorum counts. With several partitions per worker, a quorum of partitions
        stops the round when the first partition finishes, with the others still queued
        behind it: a round then covers little, or (with helpers) runs as two waves of tasks.
    grace : float in [0, 1), default=0.1
        A stopped partition with at most this share of its quota left finishes it anyway:
        a round without a straggler then counts every row, at the price of waiting at most
        this share of a scan (only while at least half the workers are expected to finish
        within this share of the least busy: with fewer near the end, the wait buys few
        rows).
        A round whose workers are expected (from their last measured rates) to finish
        within this share of each other is not stopped at all.
    patience : float in [0, inf), default=1.0
        While no worker is known to straggle (none expected, from its recent rates, to
        take more than ``1 + patience`` times the least busy one's time), a round that
        reaches its quorum stops the rest only if they have not finished after a further
        ``patience`` times the time the quorum took: a round without a straggler, whose
        workers finish a little apart (a busy core, a page fault), then counts every row as
        BSP's does, and one with a straggler that appears without warning still ends. A
        round with a known straggler stops at its quorum. 0: always at the quorum, as
        published.

    See Also
    --------
    ABSP.published : A-BSP as published (no helpers, a quorum of partitions, no grace, no
        patience).

    References
    ----------
    Wang, Chen, Pi, Zhou. "Aggressive Synchronization with Partial Processing for Iterative ML
    Jobs on Clusters." ACM/IFIP Middleware 2018.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> from daskabsp.estimators import LogisticRegression
    >>> daskabsp.ABSP()                             # what sync="absp" means
    ABSP(quorum=1, on_quorum='harvest', cursor='resume', helpers=True, count='workers', ...)
    >>> paper = daskabsp.ABSP.published()           # A-BSP as in the paper
    >>> paper.helpers, paper.count, paper.grace, paper.patience
    (False, 'partitions', 0.0, 0.0)
    >>> clf = LogisticRegression(sync=paper).fit(X, y)
    >>> clf.history_.attrs["policy"] == repr(paper)
    True

    With one worker emulated 4x slower (:func:`daskabsp.slow_workers`), its partition is stopped
    (*harvested*) in the rounds where the other finishes first:

    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
    ...                   dashboard_address=":0") as cluster, Client(cluster) as client:
    ...     slow = sorted(client.scheduler_info()["workers"])[0]
    ...     with daskabsp.slow_workers(client, {slow: 4.0}):
    ...         clf = LogisticRegression(sync="absp", n_partitions=2).fit(
    ...             *make_classification(n_samples=200_000, n_features=20, random_state=0))
    >>> bool(clf.history_.harvested.any())
    True
    """

    name: ClassVar[str] = "absp"
    quorum: int = 1
    on_quorum: Literal["harvest", "drop"] = "harvest"
    cursor: Literal["resume", "restart"] = "resume"
    helpers: bool = True
    count: Literal["workers", "partitions"] = "workers"
    grace: float = 0.1
    patience: float = 1.0

    @classmethod
    def published(cls, **kwargs) -> ABSP:
        """A-BSP as published (Wang et al. 2018): no helpers, the round ends when the first
        partition finishes (``count="partitions"``), stopped partitions stop at once
        (``grace=0``), and so does the round at its quorum (``patience=0``).

        Parameters
        ----------
        **kwargs
            Parameters of :class:`ABSP` that override these (e.g. ``on_quorum="drop"``).

        Returns
        -------
        ABSP
            The policy.
        """
        return cls(**{"helpers": False, "count": "partitions", "grace": 0.0,
                      "patience": 0.0, **kwargs})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.count not in ("workers", "partitions"):
            raise ValueError(
                "The 'count' parameter of ABSP must be a str among {'partitions', 'workers'}. "
                f"Got {self.count!r} instead."
            )
        g = self.grace
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g < 1:
            raise ValueError(
                "The 'grace' parameter of ABSP must be a float in the range [0, 1). "
                f"Got {g!r} instead."
            )
        t = self.patience
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
            raise ValueError(
                "The 'patience' parameter of ABSP must be a float in the range [0, inf). "
                f"Got {t!r} instead."
            )
        if not isinstance(self.helpers, bool):
            raise ValueError(
                "The 'helpers' parameter of ABSP must be an instance of 'bool'. "
                f"Got {self.helpers!r} instead."
            )
        q = self.quorum
        if isinstance(q, bool) or not isinstance(q, int) or q < 1:
            raise ValueError(
                "The 'quorum' parameter of ABSP must be an int in the range [1, inf). "
                f"Got {q!r} instead."
            )
        if self.on_quorum not in ("harvest", "drop"):
            raise ValueError(
                "The 'on_quorum' parameter of ABSP must be a str among {'harvest', 'drop'}. "
                f"Got {self.on_quorum!r} instead."
            )

    def round_quorum(self, n_partitions: int) -> int:
        return min(self.quorum, n_partitions)

    @property
    def quorum_unit(self) -> str:
        return self.count

    @property
    def keep_partial(self) -> bool:
        return self.on_quorum == "harvest"

    @property
    def stops(self) -> bool:
        return True

    @property
    def helped(self) -> bool:
        return self.helpers and self.on_quorum == "harvest" and self.cursor == "resume"

    def check(self, n_partitions: int) -> None:
        if self.quorum > n_partitions:
            raise ValueError(
                f"The quorum of {self!r} must be at most the number of partitions "
                f"({n_partitions}). Got quorum={self.quorum} instead."
            )


@dataclass(frozen=True)
class SSP(Policy):
    """Stale synchronous parallel: no rounds; each partition runs at its own clock, at most
    ``staleness`` clocks ahead of the slowest partition.

    The fitting process is the parameter server. Each partition's task scans the whole
    partition at the newest parameters; when it returns, its update is applied at once (the
    program's :meth:`~daskabsp.programs.Program.partition_update`) and the partition is
    submitted again with the newest parameters, unless it would then compute a clock more
    than ``staleness`` ahead of the slowest partition's: it then waits until the slowest
    catches up (Bösen's rule, Wei et al. 2015). ``SSP(0)`` sees the parameters BSP sees, in
    BSP's order; a larger bound lets fast partitions run on while a straggler catches up.
    ``max_iter`` of a fit counts clocks: at most ``max_iter`` updates per partition on
    average.

    Parameters
    ----------
    staleness : int, default=3
        Clocks a partition may run ahead of the slowest one.

    References
    ----------
    Ho, Cipar, Cui, Lee, Kim, Gibbons, Gibson, Ganger, Xing. "More Effective Distributed ML
    via a Stale Synchronous Parallel Parameter Server." NIPS 2013.
    Wei, Dai, Qiao, Ho, Cui, Ganger, Gibbons, Gibson, Xing. "Managed Communication and
    Consistency for Fast Data-Parallel Iterative Analytics." SoCC 2015 (Bösen).

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> from daskabsp.estimators import LogisticRegression
    >>> daskabsp.SSP()                              # what sync="ssp" means
    SSP(staleness=3)
    >>> clf = LogisticRegression(sync=daskabsp.SSP(staleness=1)).fit(X, y)
    >>> "update" in clf.history_.sizes           # one record per update, not per round
    True
    >>> clf.score(X, y) > 0.8
    True
    """

    name: ClassVar[str] = "ssp"
    rounds: ClassVar[bool] = False
    cursor: ClassVar[str] = "resume"  # a task scans its whole partition: no cursor to choose
    staleness: int = 3

    def __post_init__(self) -> None:
        s = self.staleness
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(
                "The 'staleness' parameter of SSP must be an int in the range [0, inf). "
                f"Got {s!r} instead."
            )

    @property
    def staleness_bound(self) -> int | None:
        return self.staleness


@dataclass(frozen=True)
class ASP(Policy):
    """Asynchronous parallel: :class:`SSP` without a bound. A partition is submitted again
    the moment its update is applied, however far ahead of the others it is.

    References
    ----------
    Recht, Re, Wright, Niu. "Hogwild!: A Lock-Free Approach to Parallelizing Stochastic
    Gradient Descent." NIPS 2011.

    Examples
    --------
    >>> from sklearn.datasets import make_classification
    >>> X, y = make_classification(n_samples=2_000, n_features=5, random_state=0)
    >>> import daskabsp
    >>> from daskabsp.estimators import LogisticRegression
    >>> daskabsp.ASP()                              # what sync="asp" means
    ASP()
    >>> clf = LogisticRegression(sync="asp").fit(X, y)
    >>> clf.history_.attrs["sync"], clf.score(X, y) > 0.8
    ('asp', True)
    """

    name: ClassVar[str] = "asp"
    rounds: ClassVar[bool] = False
    cursor: ClassVar[str] = "resume"

    def __post_init__(self) -> None:
        pass


_NAMES: dict[str, type[Policy]] = {"bsp": BSP, "absp": ABSP, "ssp": SSP, "asp": ASP}
#: The names ``sync=`` takes for the policies (with their default parameters).
SYNC_NAMES: tuple[str, ...] = tuple(_NAMES)


def as_policy(sync: str | Policy, *, owner: str = "fit") -> Policy:
    """The policy a ``sync`` argument names.

    Parameters
    ----------
    sync : {"absp", "bsp", "ssp", "asp"} or Policy
        A policy, or the name of one with its defaults (``"ssp"``: ``SSP(3)``).
    owner : str, default="fit"
        Who was given ``sync``, for the error message.

    Returns
    -------
    Policy
        ``sync`` itself, or the policy it names.

    Raises
    ------
    ValueError
        ``sync`` is neither, in scikit-learn's wording.

    Examples
    --------
    >>> import daskabsp
    >>> daskabsp.as_policy("ssp")
    SSP(staleness=3)
    >>> daskabsp.as_policy(daskabsp.ABSP.published()) == daskabsp.ABSP.published()
    True
    """
    if isinstance(sync, Policy):
        return sync
    if isinstance(sync, str) and sync in _NAMES:
        return _NAMES[sync]()
    raise ValueError(
        f"The 'sync' parameter of {owner} must be a str among {set(_NAMES)} or a "
        f"daskabsp.Policy instance. Got {sync!r} instead."
    )
