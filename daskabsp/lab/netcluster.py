"""A Dask cluster with a real network on one machine: Linux network namespaces and ``tc``.

On one machine every transfer between Dask processes goes through the loopback at several
GB/s, so nothing that costs bytes on a real network (a partition copy, a re-placement, the
driver scattering its rows) shows up. :func:`netns_cluster` gives each host a network of its
own instead:

* a **hub** namespace holds one Linux bridge, the switch;
* the **scheduler** and each **worker** process run in namespaces of their own, each linked
  to the bridge by a veth pair (the host's cable: ``eth0`` in the host's namespace, ``h-<host>``
  on the hub);
* the **driver** (the calling process, in the root namespace) is linked to the bridge the same
  way: one veth end in the root namespace carries the cluster's private subnet, and it is the
  only thing the cluster adds to the root namespace;
* every cable is shaped with ``tc tbf`` at **both** ends: the egress of the host's end limits
  what the host sends, the egress of the hub's end limits what it receives. A transfer from
  worker A to worker B therefore crosses A's sending limit and B's receiving limit, as through
  a switch with one port speed per host.

Only addresses of the private subnet (a free ``/24`` in ``10.77.0.0/16``) are ever contacted,
and the namespaces have no route beyond it. There is no latency model (this kernel has no
``netem``; a userspace delay would be needed): links here have the bandwidth of the configured
rate and the microsecond latency of a veth. Every process still shares this machine's CPUs.

Needs root (or ``CAP_NET_ADMIN`` and ``CAP_SYS_ADMIN``), ``ip`` and ``tc`` (iproute2), and
``setpriv`` and ``taskset`` (util-linux).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dask.config

__all__ = [
    "NetnsCluster",
    "NetnsUnavailable",
    "cleanup_netns",
    "netns_cluster",
    "parse_rate",
    "requirements_missing",
]

logger = logging.getLogger(__name__)

#: Every namespace (``dabsp-<id>-<host>``) and the root namespace's link (``dabsp<id>d``) carry
#: this prefix, so leftovers are recognisable (:func:`cleanup_netns`).
PREFIX = "dabsp"
#: The private subnets the clusters take their ``/24`` from.
SUBNETS = ipaddress.ip_network("10.77.0.0/16")
#: Each host has a namespace of its own, so fixed ports never collide.
SCHEDULER_PORT, WORKER_PORT, NANNY_PORT, DASHBOARD_PORT = 8786, 9000, 9001, 8787
#: Host addresses in the cluster's /24: the driver .1, the scheduler .2, worker i .(100 + i)
#: (three digits for every worker, so worker addresses sort in worker order).
DRIVER_HOST, SCHEDULER_HOST, FIRST_WORKER_HOST = 1, 2, 100
MAX_WORKERS = 150
#: Where each cluster records what it created and who owns it (read by :func:`cleanup_netns`).
STATE_DIR = Path("/run/daskabsp-netns")
#: ``tc tbf`` needs a bucket of at least ``rate / HZ`` to reach its rate (tc-tbf(8)); this
#: kernel's HZ is 250, and a bucket of at least 32 KiB holds the veth's 64 KiB GSO packets in
#: two segments. Measured with this sizing, raw TCP between two namespaces: 11.97 MB/s at
#: 100 Mbit/s, 119.8 MB/s at 1 Gbit/s (of 12.5 and 125: the rest is TCP/IP headers), against
#: 2.2 GB/s unshaped.
TBF_HZ, TBF_MIN_BURST, TBF_LATENCY = 250, 32 * 1024, "50ms"

_RATE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(bit|kbit|mbit|gbit|tbit)?(?:/s)?\s*$",
                   re.IGNORECASE)
_UNITS = {None: 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}


class NetnsUnavailable(RuntimeError):
    """This machine or process cannot build a namespace cluster (the message says why)."""


def parse_rate(rate: str | float | None) -> int | None:
    """A link rate in bits per second.

    Parameters
    ----------
    rate : str, int, float or None
        ``"100mbit"``, ``"1gbit"``, ``"100 Mbit/s"`` (units ``bit``, ``kbit``, ``mbit``,
        ``gbit``, ``tbit``, decimal: 1 mbit = 10**6 bit/s), a number of bits per second, or
        None (not shaped). tc's byte units (``mbps``: megabytes per second) are refused, as
        easy to misread.

    Returns
    -------
    int or None
        Bits per second (at least 1 000), or None.
    """
    if rate is None:
        return None
    bits: float | None = None
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        bits = float(rate)
    elif isinstance(rate, str) and (m := _RATE.match(rate)):
        bits = float(m.group(1)) * _UNITS[m.group(2) and m.group(2).lower()]
    if bits is None or not math.isfinite(bits) or bits < 1000:
        raise ValueError(
            "A link rate must be a string like '100mbit' or '1gbit' (units bit, kbit, mbit, "
            "gbit, tbit; 1mbit = 10**6 bit/s), a number of bits per second of at least 1000, "
            f"or None (not shaped). Got {rate!r} instead.")
    return int(bits)


def requirements_missing(*, pin: bool = True) -> list[str]:
    """What this process lacks to build a namespace cluster (empty: nothing).

    Parameters
    ----------
    pin : bool, default=True
        Whether ``taskset`` is needed (workers pinned to cores).

    Returns
    -------
    list of str
        One sentence per missing piece.
    """
    missing = []
    if sys.platform != "linux":
        return [f"network namespaces need Linux (this is {sys.platform})"]
    if os.geteuid() != 0:
        missing.append("root: creating network namespaces, veth links and tc qdiscs needs "
                       "root (CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("setpriv", "util-linux"),
                          *((("taskset", "util-linux"),) if pin else ())):
        if shutil.which(tool) is None:
            missing.append(f"the '{tool}' command (Debian package {package})")
    return missing


# -- commands -------------------------------------------------------------------------------


def _run(*argv: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(argv)!r} did not finish within {timeout} s") from e
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)!r} failed ({done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()}")
    return done


def _ip(ns: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("ip", *(("-n", ns) if ns else ()), *args, check=check)


def _tc(ns: str | None, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run("tc", *(("-n", ns) if ns else ()), *args, check=check)


def _json(*argv: str) -> list[dict]:
    out = _run(*argv).stdout.strip()
    return json.loads(out) if out else []


def _namespaces() -> set[str]:
    return {n["name"] for n in _json("ip", "-j", "netns", "list")}


def _root_links() -> set[str]:
    return {link["ifname"] for link in _json("ip", "-j", "link", "show")}


def _shape(ns: str | None, dev: str, bits: int | None) -> None:
    """Shape the egress of ``dev`` (in ``ns``) to ``bits`` per second, or not at all."""
    if bits is None:
        _tc(ns, "qdisc", "del", "dev", dev, "root", check=False)  # none there: nothing to do
        return
    burst = max(bits // 8 // TBF_HZ, TBF_MIN_BURST)
    _tc(ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bits}bit",
        "burst", str(burst), "latency", TBF_LATENCY)


# -- ownership of what a cluster creates ----------------------------------------------------


def _start_time(pid: int) -> str | None:
    """A process's start time (clock ticks since boot), telling it from a later one that
    reuses its pid; None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


@contextlib.contextmanager
def _state_lock(timeout: float = 30.0) -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / ".lock", "w") as f:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{STATE_DIR / '.lock'} stayed locked for "
                                       f"{timeout} s") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _states() -> dict[str, dict]:
    out = {}
    for p in STATE_DIR.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            out[p.stem] = json.loads(p.read_text())
    return out


def _owner_alive(state: Mapping) -> bool:
    return _start_time(int(state["owner_pid"])) == state.get("owner_start")


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination the root namespace routes (the default route aside) and every
    address it holds: a cluster's subnet must overlap none of them."""
    nets = [ipaddress.ip_network(r["dst"], strict=False)
            for r in _json("ip", "-j", "-4", "route", "show", "table", "all")
            if r.get("dst", "default") != "default"]
    for link in _json("ip", "-j", "-4", "addr", "show"):
        nets += [ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}").network
                 for a in link.get("addr_info", ()) if "local" in a]
    return nets


def _claim(n_workers: int, subnet: str | None) -> tuple[_Plan, ipaddress.IPv4Network]:
    """Choose the cluster's id and subnet and record the cluster as this process's before
    anything is created (under a lock: two clusters starting at once get different ones)."""
    with _state_lock():
        states = _states()
        others = {ipaddress.ip_network(s["subnet"]) for s in states.values()}
        used = _used_networks()
        if subnet is not None:
            net = ipaddress.ip_network(subnet)
            if net.version != 4 or net.prefixlen != 24 or not net.is_private:
                raise ValueError(f"The 'subnet' parameter of netns_cluster must be a private "
                                 f"IPv4 /24 like '10.77.5.0/24'. Got {subnet!r} instead.")
            candidates = [net]
        else:
            candidates = list(SUBNETS.subnets(new_prefix=24))
        free = [n for n in candidates if n not in others and not any(n.overlaps(u)
                                                                     for u in used)]
        if not free:
            raise RuntimeError(f"no free subnet: {subnet or SUBNETS} overlaps a network of "
                               "this machine or of another namespace cluster")
        taken = set(states) | {n.split("-")[1] for n in _namespaces()
                               if n.startswith(PREFIX + "-")}
        cid = next(c for c in (secrets.token_hex(2) for _ in range(1000)) if c not in taken)
        plan = _Plan(cid)
        state = {"owner_pid": os.getpid(), "owner_start": _start_time(os.getpid()),
                 "subnet": str(free[0]), **plan.names(n_workers)}
        (STATE_DIR / f"{cid}.json").write_text(json.dumps(state))
    return plan, free[0]


# -- the cluster ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Host:
    """One host of a namespace cluster.

    Attributes
    ----------
    name : str
        ``"driver"``, ``"scheduler"`` or ``"worker-<i>"``.
    ip : str
        Its address on the cluster's subnet.
    namespace : str or None
        Its network namespace (None: the driver, in the root namespace).
    dev : str
        Its end of its link (in its namespace); shaping its egress limits what it sends.
    hub_dev : str
        The hub's end of its link; shaping its egress limits what the host receives.
    """

    name: str
    ip: str
    namespace: str | None
    dev: str
    hub_dev: str


@dataclass
class NetnsCluster:
    """A running namespace cluster, as :func:`netns_cluster` yields it.

    Connect with ``distributed.Client(cluster.scheduler_address)``.

    Attributes
    ----------
    id : str
        The cluster's id (in every name it created: ``dabsp-<id>-...``).
    subnet : str
        Its private ``/24``.
    hub : str
        The namespace holding the bridge.
    hosts : dict of str to Host
        ``"driver"``, ``"scheduler"``, ``"worker-0"``, ...
    scheduler_address : str
    worker_addresses : list of str
        In worker order (``worker-0`` first); they also sort in that order.
    worker_pids : dict of str to int
        Worker address to the worker process's pid (this machine's pid namespace).
    scheduler_pid : int
    dashboard_link : str or None
        The scheduler's dashboard (``dashboard=True``), reachable from the driver.
    rates : dict of str to tuple
        Host name to its (send, receive) rates in bits per second (None: not shaped).
    log_dir : str
        The processes' logs (``<host>.log``), removed with the cluster.
    """

    id: str
    subnet: str
    hub: str
    hosts: dict[str, Host]
    scheduler_address: str = ""
    worker_addresses: list[str] = field(default_factory=list)
    worker_pids: dict[str, int] = field(default_factory=dict)
    scheduler_pid: int = 0
    dashboard_link: str | None = None
    rates: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    log_dir: str = ""

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of the cluster, the hub's included."""
        return [self.hub, *(h.namespace for h in self.hosts.values() if h.namespace)]

    def host(self, name_or_address: str) -> Host:
        """The host called ``name_or_address`` (``"worker-0"``) or serving at that address
        (``"tcp://10.77.0.100:9000"``)."""
        if name_or_address in self.hosts:
            return self.hosts[name_or_address]
        ip = re.sub(r"^\w+://", "", name_or_address).rsplit(":", 1)[0]
        for h in self.hosts.values():
            if h.ip == ip:
                return h
        raise KeyError(f"No host {name_or_address!r} in namespace cluster {self.id}; its hosts "
                       f"are {sorted(self.hosts)}.")

    def set_rate(self, host: str, rate: str | float | None, *,
                 direction: str = "both") -> None:
        """Change the rate of one host's link, now (transfers in flight slow down or speed up).

        Parameters
        ----------
        host : str
            Host name or worker address (see :meth:`host`).
        rate : str, float or None
            See :func:`parse_rate`; None removes the shaping.
        direction : {"both", "send", "receive"}, default="both"
        """
        if direction not in ("both", "send", "receive"):
            raise ValueError("The 'direction' parameter of set_rate must be one of 'both', "
                             f"'send', 'receive'. Got {direction!r} instead.")
        h, bits = self.host(host), parse_rate(rate)
        send, receive = self.rates.get(h.name, (None, None))
        if direction in ("both", "send"):
            _shape(h.namespace, h.dev, bits)
            send = bits
        if direction in ("both", "receive"):
            _shape(self.hub, h.hub_dev, bits)
            receive = bits
        self.rates[h.name] = (send, receive)

    def host_command(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as a command that runs in ``host``'s network namespace."""
        ns = self.host(host).namespace
        return [*(("ip", "netns", "exec", ns) if ns else ()), *argv]

    def measure_throughput(self, src: str, dst: str, nbytes: int = 50_000_000, *,
                           timeout: float | None = None) -> float:
        """Bytes per second of one TCP stream of ``nbytes`` from ``src`` to ``dst``.

        A sender process in ``src``'s namespace and a receiver in ``dst``'s, nothing of Dask:
        the link as the operating system sees it. Timed at the receiver, first byte to last.

        Parameters
        ----------
        src, dst : str
            Host names or worker addresses (``"driver"`` works too).
        nbytes : int, default=50_000_000
        timeout : float, optional
            Seconds; default: four times the transfer at the slower configured rate, plus 30.
        """
        s, d = self.host(src), self.host(dst)
        if timeout is None:
            rates = [r for r in (self.rates.get(s.name, (None,))[0],
                                 self.rates.get(d.name, (None, None))[1]) if r]
            timeout = 30.0 + (4 * nbytes * 8 / min(rates) if rates else 30.0)
        deadline = time.monotonic() + timeout
        rx = subprocess.Popen(self.host_command(d.name, [sys.executable, "-c", _RECEIVER,
                                                         d.ip, str(timeout)]),
                              stdout=subprocess.PIPE, text=True)
        try:
            port = _read_line(rx, deadline, "the receiver's port")
            subprocess.run(self.host_command(s.name, [sys.executable, "-c", _SENDER, d.ip,
                                                      port, str(int(nbytes)), str(timeout)]),
                           check=True, timeout=max(deadline - time.monotonic(), 1))
            got, seconds = json.loads(_read_line(rx, deadline, "the receiver's result"))
        finally:
            if rx.poll() is None:
                rx.kill()
            rx.wait(5)
            rx.stdout.close()
        if got != nbytes:
            raise RuntimeError(f"{src} -> {dst}: {got} of {nbytes} bytes arrived")
        return nbytes / seconds

    def logs(self, host: str) -> str:
        """What ``host``'s Dask process has written so far."""
        return (Path(self.log_dir) / f"{self.host(host).name}.log").read_text()


#: Receives one connection until EOF; prints its port, then ``[bytes, seconds]``.
_RECEIVER = """\
import json, socket, sys, time
s = socket.create_server((sys.argv[1], 0)); s.settimeout(float(sys.argv[2]))
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); c.settimeout(float(sys.argv[2]))
buf, n, t0 = bytearray(1 << 20), 0, None
while k := c.recv_into(buf):
    t0 = t0 or time.perf_counter(); n += k
print(json.dumps([n, time.perf_counter() - t0]), flush=True)
"""
#: Sends ``nbytes`` of random bytes (incompressible, should anything compress) and closes.
_SENDER = """\
import os, socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4]))
left, block = int(sys.argv[3]), memoryview(os.urandom(1 << 20))
while left > 0:
    c.sendall(block[:left]); left -= len(block)
c.close()
"""


def _read_line(proc: subprocess.Popen, deadline: float, what: str) -> str:
    """One line of ``proc``'s stdout, waiting at most until ``deadline``."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(max(deadline - time.monotonic(), 0))
    if not box or not box[0].strip():
        raise RuntimeError(f"no {what} in time (process {proc.pid}, exit code {proc.poll()})")
    return box[0].strip()


@contextlib.contextmanager
def netns_cluster(n_workers: int = 2, rate: str | float | None = "100mbit", *,
                  threads_per_worker: int = 1, pin: bool = True,
                  cores: Sequence[int] | None = None, memory_limit: str | int = "auto",
                  nanny: bool = False, dashboard: bool = False,
                  env: Mapping[str, str] | None = None, subnet: str | None = None,
                  timeout: float = 60.0) -> Iterator[NetnsCluster]:
    """A scheduler and worker processes each in a network namespace of its own, linked to
    the driver through a bridge, every link shaped to ``rate`` in both directions.

    Everything it created (processes, namespaces, links, logs) is removed on exit, whatever
    ends the block (an error, Ctrl-C: a second Ctrl-C during the teardown waits for it). The
    processes die with the thread that started them (``setpriv --pdeathsig``); what a killed
    driver leaves behind, :func:`cleanup_netns` removes.

    The processes are started with ``python -m distributed.cli.dask_scheduler`` and
    ``... dask_worker`` of this interpreter, in this working directory, with this process's
    ``sys.path`` (so they import what the driver imports, as a LocalCluster's workers do) and
    its Dask configuration (``DASK_INTERNAL_INHERIT_CONFIG``). Without a nanny, each worker's
    environment gets ``distributed.nanny.pre-spawn-environ`` and ``distributed.nanny.environ``
    as a nanny would set them (e.g. one BLAS thread).

    Parameters
    ----------
    n_workers : int, default=2
        Worker processes, one per namespace (at most 150).
    rate : str, float or None, default="100mbit"
        Every host's link rate, sending and receiving (see :func:`parse_rate`); None: not
        shaped. Change one host's with :meth:`NetnsCluster.set_rate`.
    threads_per_worker : int, default=1
    pin : bool, default=True
        Pin worker ``i`` to core ``cores[i % len(cores)]`` (``taskset``); the scheduler and
        the driver are not pinned.
    cores : sequence of int, optional
        Default: the cores this process may use.
    memory_limit : str or int, default="auto"
        Each worker's ``--memory-limit``; ``"auto"``: this machine's memory over
        ``n_workers``, as a LocalCluster sizes its workers (``dask worker``'s own "auto"
        would give each worker the memory of its share of the cores).
    nanny : bool, default=False
        Start each worker under a nanny (two processes in its namespace; a killed worker is
        restarted). ``worker_pids`` are the workers', not the nannies'.
    dashboard : bool, default=False
        Serve the scheduler's dashboard (at ``dashboard_link``).
    env : mapping of str to str, optional
        More environment variables for the scheduler and the workers.
    subnet : str, optional
        The private ``/24`` to use; default: the first free one in ``10.77.0.0/16``.
    timeout : float, default=60.0
        Seconds to wait for the scheduler, then for the workers, to come up.

    Yields
    ------
    NetnsCluster

    Raises
    ------
    NetnsUnavailable
        Without root, ``ip``, ``tc``, ``setpriv`` or (``pin=True``) ``taskset``.

    Examples
    --------
    >>> with netns_cluster(2, "100mbit") as nc, Client(nc.scheduler_address) as client:
    ...     est.fit(X, y)  # doctest: +SKIP
    """
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or \
            not 1 <= n_workers <= MAX_WORKERS:
        raise ValueError(f"The 'n_workers' parameter of netns_cluster must be an int in the "
                         f"range [1, {MAX_WORKERS}]. Got {n_workers!r} instead.")
    if isinstance(threads_per_worker, bool) or not isinstance(threads_per_worker, int) or \
            threads_per_worker < 1:
        raise ValueError("The 'threads_per_worker' parameter of netns_cluster must be an int "
                         f"in the range [1, inf). Got {threads_per_worker!r} instead.")
    if not timeout > 0:
        raise ValueError(f"The 'timeout' parameter of netns_cluster must be a positive number "
                         f"of seconds. Got {timeout!r} instead.")
    bits = parse_rate(rate)
    if missing := requirements_missing(pin=pin):
        raise NetnsUnavailable("netns_cluster needs " + "; ".join(missing) + ".")
    cores = [int(c) for c in (cores if cores is not None else sorted(os.sched_getaffinity(0)))]
    if pin and not cores:
        raise ValueError("The 'cores' parameter of netns_cluster must name at least one core.")

    if memory_limit == "auto":
        from distributed.system import MEMORY_LIMIT

        memory_limit = int(MEMORY_LIMIT // n_workers)
    plan, net = _claim(n_workers, subnet)
    with _teardown_on_exit(plan):
        nc = _build_network(plan, net, n_workers, bits)
        _start(plan, nc, n_workers, threads_per_worker, cores if pin else None, memory_limit,
               nanny, dashboard, env or {}, timeout)
        logger.info("namespace cluster %s: %d workers at %s on %s", plan.id, n_workers,
                    rate if bits else "unshaped", net)
        yield nc


@dataclass
class _Plan:
    """What one cluster creates, recorded as it goes, so the teardown removes exactly that."""

    id: str
    namespaces: list[str] = field(default_factory=list)
    root_links: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen] = field(default_factory=list)
    tmp: str | None = None

    def ns(self, host: str) -> str:
        return f"{PREFIX}-{self.id}-{host}"

    @property
    def driver_link(self) -> str:
        return f"{PREFIX}{self.id}d"

    def names(self, n_workers: int) -> dict[str, list[str]]:
        return {"namespaces": [self.ns(h) for h in ("hub", "s",
                                                      *(f"w{i}" for i in range(n_workers)))],
                "root_links": [self.driver_link]}


def _build_network(plan: _Plan, net: ipaddress.IPv4Network, n_workers: int,
                   bits: int | None) -> NetnsCluster:
    hub = plan.ns("hub")
    ip = [str(a) for a in net]
    hosts = {"driver": Host("driver", ip[DRIVER_HOST], None, plan.driver_link, "h-d"),
             "scheduler": Host("scheduler", ip[SCHEDULER_HOST], plan.ns("s"), "eth0", "h-s")}
    for i in range(n_workers):
        hosts[f"worker-{i}"] = Host(f"worker-{i}", ip[FIRST_WORKER_HOST + i], plan.ns(f"w{i}"),
                                    "eth0", f"h-w{i}")
    for ns in [hub] + [h.namespace for h in hosts.values() if h.namespace]:
        _run("ip", "netns", "add", ns)
        plan.namespaces.append(ns)
        _ip(ns, "link", "set", "lo", "up")
    _ip(hub, "link", "add", "br0", "type", "bridge", "forward_delay", "0")
    _ip(hub, "link", "set", "br0", "up")
    for h in hosts.values():
        if h.namespace:
            _ip(hub, "link", "add", h.hub_dev, "type", "veth", "peer", "name", h.dev,
                "netns", h.namespace)
        else:
            _ip(None, "link", "add", h.dev, "type", "veth", "peer", "name", h.hub_dev,
                "netns", hub)
            plan.root_links.append(h.dev)
            # no IPv6 link-local address or router solicitations from the root namespace
            with contextlib.suppress(OSError):
                Path(f"/proc/sys/net/ipv6/conf/{h.dev}/disable_ipv6").write_text("1")
        _ip(hub, "link", "set", h.hub_dev, "master", "br0", "up")
        _ip(h.namespace, "addr", "add", f"{h.ip}/{net.prefixlen}", "dev", h.dev)
        _ip(h.namespace, "link", "set", h.dev, "up")
    nc = NetnsCluster(id=plan.id, subnet=str(net), hub=hub, hosts=hosts)
    for h in hosts.values():
        nc.set_rate(h.name, bits)
    return nc


def _environment(extra: Mapping[str, str], worker: bool, nanny: bool) -> dict[str, str]:
    env = dict(os.environ)
    try:
        env["DASK_INTERNAL_INHERIT_CONFIG"] = dask.config.serialize(dask.config.global_config)
    except (TypeError, ValueError) as e:
        logger.warning("netns_cluster: the Dask configuration cannot be passed on (%s); the "
                       "processes read their own", e)
    # the caller's own entries (a script's folder, a test's): the interpreter adds the rest
    own = [os.path.abspath(p or os.curdir) for p in sys.path]
    own = [p for p in own if os.path.isdir(p)
           and not p.startswith((sys.prefix, sys.base_prefix, sys.exec_prefix))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(own))
    if worker and not nanny:
        for key in ("distributed.nanny.pre-spawn-environ", "distributed.nanny.environ"):
            env.update({k: str(v) for k, v in (dask.config.get(key, None) or {}).items()})
    env.update({str(k): str(v) for k, v in extra.items()})
    return env


def _spawn(plan: _Plan, nc: NetnsCluster, host: Host, argv: list[str], env: dict[str, str],
           core: int | None) -> subprocess.Popen:
    # setpriv: the process is killed if the thread that started it ends (a killed driver)
    cmd = ["setpriv", "--pdeathsig", "KILL", "--", "ip", "netns", "exec", host.namespace,
           *(("taskset", "-c", str(core)) if core is not None else ()), sys.executable, *argv]
    with open(Path(nc.log_dir) / f"{host.name}.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    plan.processes.append(proc)
    return proc


def _start(plan: _Plan, nc: NetnsCluster, n_workers: int, threads: int,
           cores: list[int] | None, memory_limit, nanny: bool, dashboard: bool,
           extra_env: Mapping[str, str], timeout: float) -> None:
    plan.tmp = nc.log_dir = tempfile.mkdtemp(prefix=f"{PREFIX}-{plan.id}-")
    sched = nc.hosts["scheduler"]
    sched_file = Path(plan.tmp) / "scheduler.json"
    nc.scheduler_address = f"tcp://{sched.ip}:{SCHEDULER_PORT}"
    board = (["--dashboard-address", f"{sched.ip}:{DASHBOARD_PORT}"] if dashboard
             else ["--no-dashboard"])
    proc = _spawn(plan, nc, sched, ["-m", "distributed.cli.dask_scheduler", "--host", sched.ip,
                                    "--port", str(SCHEDULER_PORT), "--scheduler-file",
                                    str(sched_file), *board],
                  _environment(extra_env, False, nanny), None)
    nc.scheduler_pid = proc.pid
    nc.dashboard_link = f"http://{sched.ip}:{DASHBOARD_PORT}/status" if dashboard else None
    deadline = time.monotonic() + timeout
    while not sched_file.exists():
        _check_alive(nc, [(sched.name, proc)], deadline, "the scheduler to start")
        time.sleep(0.05)

    env = _environment(extra_env, True, nanny)
    started = [(sched.name, proc)]
    for i in range(n_workers):
        w = nc.hosts[f"worker-{i}"]
        ports = ["--nanny", "--nanny-port", str(NANNY_PORT)] if nanny else ["--no-nanny"]
        argv = ["-m", "distributed.cli.dask_worker", nc.scheduler_address, "--host", w.ip,
                "--worker-port", str(WORKER_PORT), *ports, "--nthreads", str(threads),
                "--name", w.name, "--memory-limit", str(memory_limit), "--no-dashboard",
                "--death-timeout", str(timeout),
                "--local-directory", str(Path(plan.tmp) / w.name)]
        core = cores[i % len(cores)] if cores else None
        started.append((w.name, _spawn(plan, nc, w, argv, env, core)))
        nc.worker_addresses.append(f"tcp://{w.ip}:{WORKER_PORT}")
    _wait_for_workers(nc, started, time.monotonic() + timeout, nanny)


def _check_alive(nc: NetnsCluster, procs: list[tuple[str, subprocess.Popen]],
                 deadline: float, what: str) -> None:
    for name, p in procs:
        if p.poll() is not None:
            raise RuntimeError(f"namespace cluster {nc.id}: {name} exited with code "
                               f"{p.returncode} while waiting for {what}; its log ends:\n"
                               + _tail(nc, name))
    if time.monotonic() > deadline:
        raise TimeoutError(f"namespace cluster {nc.id}: no {what} in time; the logs end:\n"
                           + "\n".join(f"[{n}]\n{_tail(nc, n)}" for n, _ in procs))


def _tail(nc: NetnsCluster, name: str, lines: int = 15) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(nc.logs(name).splitlines()[-lines:])
    return "(no log)"


def _wait_for_workers(nc: NetnsCluster, procs: list[tuple[str, subprocess.Popen]],
                      deadline: float, nanny: bool) -> None:
    """Until the scheduler lists every worker (asked of the scheduler itself), or raise."""
    from distributed import Client

    want = set(nc.worker_addresses)
    with Client(nc.scheduler_address, timeout=max(deadline - time.monotonic(), 1),
                set_as_default=False) as client:
        while True:
            got = set(client.sync(client.scheduler.identity)["workers"])
            if want <= got:
                break
            _check_alive(nc, procs, deadline, f"the workers to register ({len(want & got)} "
                         f"of {len(want)})")
            time.sleep(0.05)
        if nanny:
            nc.worker_pids = dict(client.run(os.getpid, workers=nc.worker_addresses))
        else:
            nc.worker_pids = {a: p.pid for a, (_, p) in zip(nc.worker_addresses, procs[1:],
                                                          strict=True)}


# -- teardown ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _teardown_on_exit(plan: _Plan) -> Iterator[None]:
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        with _sigint_deferred():
            left = _teardown(plan)
        if left:
            msg = (f"namespace cluster {plan.id} left {left} behind; "
                   "daskabsp.lab.netcluster.cleanup_netns() removes it once this process exits")
            if failed:
                logger.error(msg)
            else:
                raise RuntimeError(msg)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Ctrl-C during the block is held until its end (a half-removed cluster helps nobody)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _teardown(plan: _Plan) -> list[str]:
    """Stop the processes, delete the links and namespaces, the logs and the state file;
    return what is still there (nothing, normally)."""
    _stop(plan.processes)
    for ns in plan.namespaces:  # anything else running there (a process of the caller's)
        pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
        _kill_all([int(p) for p in pids])
    for link in plan.root_links:
        _ip(None, "link", "del", link, check=False)
    for ns in plan.namespaces:
        _run("ip", "netns", "del", ns, check=False)
    deadline = time.monotonic() + 10
    while True:  # a namespace's links go with it, asynchronously in the kernel
        left = ([n for n in plan.namespaces if n in _namespaces()]
                + [link for link in plan.root_links if link in _root_links()])
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if plan.tmp:
        shutil.rmtree(plan.tmp, ignore_errors=True)
    if not left:
        with contextlib.suppress(OSError):
            (STATE_DIR / f"{plan.id}.json").unlink()
    return left


def _stop(procs: list[subprocess.Popen], grace: float = 3.0) -> None:
    """SIGTERM, then SIGKILL what still runs after ``grace`` seconds: the workers first, then
    the scheduler (a worker whose scheduler is gone spends many seconds trying to say
    goodbye: measured, 3 of 8 workers still running 15 s after a SIGTERM sent to all at once,
    against 0.2-0.5 s for all in this order)."""
    for group in (procs[1:], procs[:1]):
        for p in group:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.terminate()
        deadline = time.monotonic() + grace
        for p in group:
            try:
                p.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                p.kill()
        for p in group:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)


def _kill_all(pids: list[int], timeout: float = 10.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(_start_time(p) is not None and not _zombie(p) for p in pids):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)


def _zombie(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    return False


def cleanup_netns(*, force: bool = False) -> list[str]:
    """Remove what namespace clusters of dead processes left behind (a killed driver).

    A cluster whose owner process still runs is left alone (``force=True``: removed too;
    only when nothing else uses one). Namespaces with the ``dabsp-`` prefix that no cluster
    recorded are removed as well.

    Parameters
    ----------
    force : bool, default=False

    Returns
    -------
    list of str
        The namespaces and links removed.
    """
    if missing := [m for m in requirements_missing(pin=False) if "setpriv" not in m]:
        raise NetnsUnavailable("cleanup_netns needs " + "; ".join(missing) + ".")
    removed: list[str] = []
    with _state_lock():
        states = _states()
        known = set()
        for cid, state in states.items():
            known.update(state.get("namespaces", ()))
            if force or not _owner_alive(state):
                plan = _Plan(cid, list(state.get("namespaces", ())),
                             list(state.get("root_links", ())))
                present = _namespaces() | _root_links()
                if not _teardown(plan):
                    removed += [n for n in plan.namespaces + plan.root_links if n in present]
        stray = [n for n in _namespaces() if n.startswith(PREFIX + "-") and n not in known]
        stray_links = [n for n in _root_links() if re.fullmatch(PREFIX + r"[0-9a-f]{4}d", n)
                       and n.removeprefix(PREFIX)[:4] not in states]
        for ns in stray:
            _kill_all([int(p) for p in _run("ip", "netns", "pids", ns,
                                            check=False).stdout.split()])
            _run("ip", "netns", "del", ns, check=False)
        for link in stray_links:
            _ip(None, "link", "del", link, check=False)
        removed += stray + stray_links
    if removed:
        logger.info("cleanup_netns removed %s", removed)
    return removed
