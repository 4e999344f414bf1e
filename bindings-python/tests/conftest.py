"""Fixtures: stores to run the contracts against.

Every contract test takes the `store` fixture, which runs it once per entry
of MODES: "owned" opens the directory in this process; "connected" opens the
owner here too, then tests a second handle made by
`tinystore.connect("unix:<dir>/tinystore.sock")`, which reaches the store
over its socket like any other process would. Tests marked
`@pytest.mark.cluster` (the lock, fence and channel contracts) run a third
time, "cluster": `tinystore.connect("etcd://.../<prefix>?nats=nats://...")`
on a real 3-member etcd cluster (Debian's etcd) and a real 3-node NATS
cluster with JetStream (Debian's nats-server), which the first such test
starts on free loopback ports in temporary directories, stopped by PID at
the end of the session. Each test has a prefix of its own, so its streams
are its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional

import pytest

import tinystore

# All by default; TINYSTORE_TEST_MODES=owned (or connected, or cluster) runs one.
MODES = os.environ.get("TINYSTORE_TEST_MODES", "owned,connected,cluster").split(",")

LOG = 1024  # a branch keeps its newest 1,024 messages (and a client's inbox as many)

HERE = Path(__file__).parent
MIGRATIONS = HERE / "migrations"
VECTORS = HERE.parent.parent / "tests" / "vectors" / "fences.json"


def _port_band() -> range:
    """Ports below (else above) the kernel's ephemeral range: a port the OS
    picks on bind(0) lies in that range, where any outgoing connection
    (etcdctl's health checks, the members' own) may take it as its local
    port before the server binds it, and the server then exits with
    "address already in use"."""
    try:
        lo, hi = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    return range(max(2024, lo - 20000), lo) if lo >= 3024 else range(hi + 1, 65536)


_BAND = _port_band()
# each process starts at its own place in the band, so test processes
# running at once rarely try the same ports
_next_port = (os.getpid() * 2654435761 + time.time_ns()) % max(len(_BAND), 1)


def _free_port() -> int:
    """A loopback port nobody listens on now, outside the ephemeral range
    (see _port_band); successive calls give different ports."""
    global _next_port
    if len(_BAND) < 1000:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(len(_BAND)):
        port = _BAND[_next_port % len(_BAND)]
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_BAND}")


def _log_tails(paths: list[Path], n: int) -> str:
    """The last `n` lines of each log, for an error that says why a server
    did not come up (its directory is removed with it)."""
    out = []
    for p in paths:
        try:
            lines = p.read_text(errors="replace").splitlines()
        except OSError as e:
            lines = [f"({e})"]
        out.append(f"{p.name}:\n" + "\n".join(lines[-n:]))
    return "\n".join(out)


def make_pki(dir: Path) -> dict[str, Path]:
    """With Debian's openssl: a CA, a member certificate for 127.0.0.1 and a
    client certificate, both signed by the CA, and another self-signed CA
    that signed neither; PEM files in `dir`, by name."""
    files = {n: dir / f"{n}.pem" for n in ("ca", "ca-key", "member", "member-key", "client", "client-key", "other-ca", "other-ca-key")}
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    for ca, name in (("ca", "tinystore test etcd CA"), ("other-ca", "another CA")):
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", str(files[f"{ca}-key"]), "-out", str(files[ca]))
    for who, ext in (("member", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth"),
                     ("client", "extendedKeyUsage=clientAuth")):
        csr = dir / f"{who}.csr"
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN=tinystore test {who}",
            "-keyout", str(files[f"{who}-key"]), "-out", str(csr))
        extfile = dir / f"{who}.ext"
        extfile.write_text(ext + "\n")
        run("x509", "-req", "-in", str(csr), "-CA", str(files["ca"]), "-CAkey", str(files["ca-key"]), "-CAcreateserial",
            "-days", "2", "-extfile", str(extfile), "-out", str(files[who]))
    return files


class EtcdCluster:
    """`members` etcd members (3 by default) on free loopback ports, their
    data in a temporary directory; `stop` kills each by PID. Elections are
    fast (heartbeat 50 ms, election 500 ms), so etcd's smallest lease ttl is
    1 s. With `tls`, members serve clients TLS only and ask for client
    certificates (--client-cert-auth), from the CA in `self.pki`."""

    def __init__(self, members: int = 3, tls: bool = False) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tinystore-etcd-py"))
        self.pki = make_pki(self.dir) if tls else None
        scheme = "https" if tls else "http"
        tls_args = [] if self.pki is None else [
            "--cert-file", str(self.pki["member"]), "--key-file", str(self.pki["member-key"]),
            "--trusted-ca-file", str(self.pki["ca"]), "--client-cert-auth"]
        self.ports = [(_free_port(), _free_port()) for _ in range(members)]
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(self.ports))
        self.procs: list[subprocess.Popen[bytes]] = []
        for i, (c, p) in enumerate(self.ports):
            log = open(self.dir / f"m{i}.log", "wb")
            self.procs.append(subprocess.Popen(
                ["etcd", "--name", f"m{i}", "--data-dir", str(self.dir / f"m{i}"),
                 "--listen-client-urls", f"{scheme}://127.0.0.1:{c}", "--advertise-client-urls", f"{scheme}://127.0.0.1:{c}",
                 *tls_args,
                 "--listen-peer-urls", f"http://127.0.0.1:{p}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                 "--initial-cluster", initial, "--initial-cluster-state", "new",
                 "--heartbeat-interval", "50", "--election-timeout", "500"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            ))
        self.scheme = "etcds" if tls else "etcd"
        self.endpoints = ",".join(f"127.0.0.1:{c}" for c, _ in self.ports)
        deadline = time.monotonic() + 45
        while self.etcdctl("endpoint", "health", check=False).returncode != 0:
            if time.monotonic() > deadline:
                logs = _log_tails([self.dir / f"m{i}.log" for i in range(members)], 3)
                self.stop()
                raise RuntimeError(f"etcd did not become healthy within 45 s; {logs}")
            time.sleep(0.1)

    def etcdctl(self, *args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
        """Runs etcdctl against the members (with the client certificate
        under TLS); with `check`, fails the test when it fails."""
        scheme = "http" if self.pki is None else "https"
        eps = ",".join(f"{scheme}://127.0.0.1:{c}" for c, _ in self.ports)
        tls = [] if self.pki is None else [
            "--cacert", str(self.pki["ca"]), "--cert", str(self.pki["client"]), "--key", str(self.pki["client-key"])]
        out = subprocess.run(["etcdctl", f"--endpoints={eps}", *tls, *args],
                             env={**os.environ, "ETCDCTL_API": "3"}, capture_output=True, text=True)
        if check and out.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {out.stderr}")
        return out

    def address(self, prefix: str) -> str:
        return f"{self.scheme}://{self.endpoints}/{prefix}"

    def stop(self) -> None:
        for p in self.procs:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def etcd_cluster() -> Any:
    c = EtcdCluster()
    yield c
    c.stop()


class NatsCluster:
    """3 nats-server nodes with JetStream (Debian's nats-server), clustered
    on free loopback ports, each node's config and JetStream directory in a
    temporary directory (the streams are memory streams); `stop` kills each
    by PID. As core/tests/nats/mod.rs: `max_payload: 2MB` (a message of
    1 MiB and its headers is over the default 1 MiB), and a memory store
    large enough for the many streams of a session (each reserves its
    max_bytes, 64 MiB, on every node; nothing is used until written)."""

    def __init__(self) -> None:
        if shutil.which("nats-server") is None:
            raise RuntimeError("nats-server is missing: install Debian's nats-server (`apt-get install nats-server`; `make test` does)")
        self.dir = Path(tempfile.mkdtemp(prefix="tinystore-nats-py"))
        self.ports = [(_free_port(), _free_port(), _free_port()) for _ in range(3)]  # client, route, monitoring
        routes = ", ".join(f"nats-route://127.0.0.1:{r}" for _, r, _ in self.ports)
        self.procs: list[subprocess.Popen[bytes]] = []
        for i, (c, r, h) in enumerate(self.ports):
            conf = self.dir / f"n{i}.conf"
            conf.write_text(
                f"server_name: n{i}\nlisten: 127.0.0.1:{c}\nhttp: 127.0.0.1:{h}\nmax_payload: 2MB\n"
                f"jetstream {{ store_dir: {json.dumps(str(self.dir / f'n{i}'))}, max_memory_store: 64GB, max_file_store: 16MB }}\n"
                f"cluster {{ name: tinystore, listen: 127.0.0.1:{r}, routes: [{routes}] }}\n"
            )
            log = open(self.dir / f"n{i}.log", "wb")
            self.procs.append(subprocess.Popen(["nats-server", "-c", str(conf)], stdout=log, stderr=log, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        for _, _, h in self.ports:  # /healthz is ok once JetStream has a meta leader
            while not self._healthy(h):
                if time.monotonic() > deadline:
                    logs = _log_tails([self.dir / f"n{i}.log" for i in range(3)], 5)
                    self.stop()
                    raise RuntimeError(f"nats-server did not become healthy within 30 s; {logs}")
                time.sleep(0.1)

    @staticmethod
    def _healthy(port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def urls(self, which: tuple[int, ...] = (0, 1, 2)) -> str:
        """`nats://127.0.0.1:PORT,...` of the nodes `which`."""
        return ",".join(f"nats://127.0.0.1:{self.ports[i][0]}" for i in which)

    def kill(self, i: int) -> None:
        """kill -9 of node `i` (its replicas of the memory streams are gone)."""
        if self.procs[i].poll() is None:
            os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].wait()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def nats_cluster() -> Any:
    c = NatsCluster()
    yield c
    c.stop()


# The cluster's stores wait longer for a stream's first leader than the
# default 10 s: on 2 cores beside 6 servers one was seen to take longer.
CLUSTER_TIMEOUT = 30.0



def pytest_generate_tests(metafunc: Any) -> None:
    """Every test of `stores` runs owned and connected; a test marked
    `cluster` also on a cluster store."""
    if "stores" in metafunc.fixturenames:
        marked = metafunc.definition.get_closest_marker("cluster") is not None
        metafunc.parametrize("stores", [m for m in MODES if m != "cluster" or marked], indirect=True)


class Stores:
    """Opens stores of one mode in one directory (cluster: under one key
    prefix, SQL databases in the directory); closes them all at the end."""

    def __init__(self, mode: str, dir: Path, cluster: Optional[EtcdCluster] = None, prefix: str = "",
                 nats: Optional[NatsCluster] = None) -> None:
        self.mode = mode
        self.dir = dir
        self.cluster = cluster
        self.nats = nats
        self.prefix = prefix
        self.opened: list[tinystore.Store] = []
        self.owner: Optional[tinystore.Store] = None

    async def open(self) -> tinystore.Store:
        """A store of this mode (for connected mode, the owner is opened first)."""
        if self.cluster is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            os.environ["TINYSTORE_CLUSTER_SQL_DIR"] = str(self.dir)
            self.owner = await tinystore.connect(self.address(), request_timeout=CLUSTER_TIMEOUT)
            self.opened.append(self.owner)
            return self.owner
        self.owner = await tinystore.open(self.dir)
        self.opened.append(self.owner)
        if self.mode == "owned":
            return self.owner
        store = await tinystore.connect(f"unix:{self.dir / 'tinystore.sock'}")
        self.opened.append(store)
        return store

    def address(self, prefix: Optional[str] = None) -> str:
        """Cluster: the store's address, its channels on the NATS cluster
        (`prefix`: another store's, on the same servers)."""
        assert self.cluster is not None and self.nats is not None
        return f"{self.cluster.address(prefix or self.prefix)}?nats={self.nats.urls()}"

    def forwarded(self) -> bool:
        """Connected: true once the owner has handed every subscription all it
        has (no lag), so the rest is on the wire to the client's inbox. Owned
        (no wire): true."""
        assert self.owner is not None
        return self.mode == "owned" or all(lag == 0 for b in self.owner.status()["branches"] for lag in b["lag"])

    async def close(self) -> None:
        for s in reversed(self.opened):
            await s.close()
        self.opened.clear()


_prefixes = iter(range(1, 1 << 30))


@pytest.fixture
async def stores(request: Any, tmp_path: Path) -> AsyncIterator[Stores]:
    if request.param == "cluster":
        # Short: a stream is named after it (ts-PREFIX-CHANNEL, `-` escaped as _2D).
        prefix = f"py{os.getpid()}-{next(_prefixes)}-{re.sub('[^a-z0-9]+', '-', request.node.name.lower())[:40]}"
        s = Stores("cluster", tmp_path / "store", request.getfixturevalue("etcd_cluster"), prefix,
                   request.getfixturevalue("nats_cluster"))
    else:
        s = Stores(request.param, tmp_path / "store")
    yield s
    await s.close()


@pytest.fixture
async def store(stores: Stores) -> tinystore.Store:
    return await stores.open()


async def until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Waits (yielding to the loop) until `cond()` is true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def told_exactly(seen: list[Any], published: list[Any]) -> tinystore.Missed:
    """Checks CHAN-02 on what a subscriber that fell behind got: `seen` holds
    the values of its messages and the `Missed` it was told, in the order it
    got them; `published` the values published, in order.

    It was told once (reason "behind"), before the first message after the
    gap; the count is exactly how many it never got (every message is either
    delivered or counted, none twice); then it went on from the oldest message
    still kept (at least the log's newest 1,024) to the last. Gives the
    `Missed`.

    Owned, the log is the only place messages wait, so the count is the
    number published past the log. Connected, what was already on the wire
    waits in the client's inbox (bounded like a log, counted there), so more
    can arrive after a reader resumes: fewer missed, still exactly counted.
    """
    misses = [i for i, x in enumerate(seen) if isinstance(x, tinystore.Missed)]
    assert len(misses) == 1, f"told {len(misses)} times: {[seen[i] for i in misses]}"
    at = misses[0]
    missed = seen[at]
    assert missed.reason == "behind" and missed.count is not None and missed.count > 0, missed
    assert seen[:at] == published[:at], "before the gap: every message, in order"
    after = seen[at + 1 :]
    assert after == published[at + missed.count :], "after the gap: from the oldest kept to the last, in order"
    assert len(after) >= LOG, f"the newest {LOG} are kept; got {len(after)}"
    return missed


def python_env() -> dict[str, str]:
    """The environment for a child Python that imports this package."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
