"""Benchmarks of the Python binding, against redis-py and a bare socket, in one run.

    make bench    # a release wheel into .venv-bench (with redis-py), then this

Every workload runs from Python, on tinystore owned (this process owns the
store), tinystore connected (another process owns it; this one connects
through its Unix socket), and redis-py against Debian's ``redis-server``
(started here on a Unix socket, stopped at the end). redis-py runs both
ways, synchronous and asyncio, and each row takes its better one. The floor
is a bare one-byte ping-pong over a Unix socket between two Python
processes (synchronous sockets, and asyncio streams). Each figure is the
best of 3 rounds; the rounds take turns (tinystore owned, connected,
redis-py, the floor), so a change in the machine's load falls on all of
them. Prints a Markdown table with ratios (tinystore / redis-py) and, for
the one-at-a-time rows, the connected cost in floor round trips (the
synchronous floor measured in the same rounds).

Workloads (messages are ``{"kind": "message", "id": i}`` as JSON, decoded
by the reader in every case):

- publish->deliver, each publish awaited: a publisher awaits each publish
  while a subscriber in the same process counts deliveries; at most 512
  published and not yet delivered (so nothing is dropped by a branch's log);
  messages delivered per second.
- publish->deliver, 64 in flight: the same, 64 publishes sent before
  awaiting them (redis-py: a pipeline of 64).
- publish->deliver, one at a time: publish, wait until the subscriber has
  it, then the next: the round trip of one message.
- fan-out, 64 in flight, 100 subscribers: one publisher publishes 64 at a
  time (awaited in windows, as above) to one branch that 100 subscribers
  read, each on its own connection to the store: each is its own
  ``tinystore.connect(address)`` in this process (one connected store, one
  socket and one session each; owned: to this process's own store socket,
  connected: to the other process's), all on this process's event loop;
  redis-py: 100 ``SUBSCRIBE`` connections (asyncio: one task each, reading
  with ``listen()``; sync: one thread each, with ``get_message``, the faster
  of the two in each) and one client ``PUBLISH``ing in pipelines of 64. At
  most 512 messages published and not yet delivered to the slowest
  subscriber, so none falls behind its branch's log of 1,024; a run fails
  if a tinystore subscriber was told of any missed message. Deliveries per
  second: messages published x 100 / the time until every subscriber has
  every message.
- hold+release, sequential: ``async with lock.hold(key)`` with an empty
  block (redis-py: ``SET key token NX PX 30000``, then a Lua release that
  deletes the key only if it still holds the token).
- hold+release, 4 processes on one key: handoffs per second among 4
  processes (owned: each calls ``tinystore.open(dir)``, so one owns and
  three connect; connected: 4 processes connect to a fifth that owns;
  redis-py: 4 processes spin on ``SET NX``, Redis has no waiting).

While working on one row: ``BENCH_ONLY=fanout`` (a comma-separated list of
``stream``, ``pipelined``, ``one``, ``hold``, ``processes``, ``fanout``)
runs only those rows, and ``BENCH_SCALE=0.1`` scales every row's count of
messages or cycles (the floor excepted).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, Dict, List, Optional, Tuple

import tinystore

BEST_OF = 3
WINDOW = 512  # published and not yet delivered, at most
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"

# Messages (or cycles) per run of each workload, sized for about a second.
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
N_STREAM = int(60_000 * SCALE)
N_ONE = int(5_000 * SCALE)
N_HOLD = int(20_000 * SCALE)
N_PROCS = int(2_000 * SCALE)  # per process
# Fan-out: published, each delivered to every subscriber (redis-py's runs take
# several seconds at this count).
N_FAN = int(2_000 * SCALE)
FAN_SUBSCRIBERS = 100
ONLY = {w for w in os.environ.get("BENCH_ONLY", "").split(",") if w}


def payload(i: int) -> Dict[str, Any]:
    return {"kind": "message", "id": i}


class Window:
    """At most ``size`` messages published and not yet delivered."""

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self.delivered = 0
        self._want = 0
        self._waiter: Optional[asyncio.Future[None]] = None

    def deliver(self) -> None:
        self.delivered += 1
        if self._waiter is not None and self.delivered >= self._want:
            self._waiter.set_result(None)
            self._waiter = None

    async def until(self, delivered: int) -> None:
        if self.delivered < delivered:
            self._want = delivered
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    async def room(self, published: int) -> None:
        if published - self.delivered >= self.size:
            await self.until(published - self.size // 2)


class FanWindow:
    """A :class:`Window` over several subscribers: at most ``size`` messages
    published and not yet delivered to the slowest of them."""

    def __init__(self, subscribers: int, size: int = WINDOW) -> None:
        self.size = size
        self.delivered = [0] * subscribers
        self.missed: List[tinystore.Missed] = []
        self._want = 0
        self._short = 0  # subscribers below _want
        self._waiter: Optional[asyncio.Future[None]] = None

    def deliver(self, k: int) -> None:
        d = self.delivered[k] = self.delivered[k] + 1
        if self._waiter is not None and d == self._want:
            self._short -= 1
            if self._short == 0:
                self._waiter.set_result(None)
                self._waiter = None

    def miss(self, m: tinystore.Missed) -> None:
        self.missed.append(m)
        if self._waiter is not None:
            self._waiter.set_exception(AssertionError(f"a subscriber missed messages: {m}"))
            self._waiter = None

    async def until(self, delivered: int) -> None:
        assert not self.missed, f"subscribers missed messages: {self.missed}"
        short = sum(1 for d in self.delivered if d < delivered)
        if short:
            self._want, self._short = delivered, short
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    async def room(self, published: int) -> None:
        assert not self.missed, f"subscribers missed messages: {self.missed}"
        if published - min(self.delivered) >= self.size:
            await self.until(published - self.size // 2)


# --- tinystore ---------------------------------------------------------------


async def ts_stream(store: tinystore.Store, n: int, in_flight: int) -> float:
    branch = store.channel("bench").under(f"stream-{in_flight}")
    w = Window()
    sub = await branch.subscribe(lambda m: w.deliver())
    started = time.perf_counter()
    if in_flight == 1:
        for i in range(n):
            await w.room(i)
            await branch.publish(payload(i))
    else:
        for i in range(0, n, in_flight):
            await w.room(i)
            await asyncio.gather(*[branch.publish(payload(j)) for j in range(i, min(n, i + in_flight))])
    await w.until(n)
    took = time.perf_counter() - started
    await sub.stop()
    return n / took


async def ts_one_at_a_time(store: tinystore.Store, n: int) -> float:
    branch = store.channel("bench").under("one")
    w = Window()
    sub = await branch.subscribe(lambda m: w.deliver())
    started = time.perf_counter()
    for i in range(n):
        await branch.publish(payload(i))
        await w.until(i + 1)
    took = time.perf_counter() - started
    await sub.stop()
    return n / took


async def ts_fanout(store: tinystore.Store, n: int, in_flight: int, subscribers: int) -> float:
    """``store`` publishes; each subscriber is its own ``tinystore.connect``
    (its own socket and session: the binding shares no connection between
    two connects) to the socket of the process that owns the store (owned:
    this one), subscribing on this process's loop. Deliveries per second."""
    address = f"unix:{os.path.join(store.dir, 'tinystore.sock')}"
    readers: List[tinystore.Store] = list(await asyncio.gather(*[tinystore.connect(address) for _ in range(subscribers)]))
    try:
        w = FanWindow(subscribers)
        subs = []
        for k, r in enumerate(readers):
            def deliver(m: tinystore.Message[Any], k: int = k) -> None:
                w.deliver(k)

            subs.append(await r.channel("bench").under("fanout").subscribe(deliver, on_missed=w.miss))
        branch = store.channel("bench").under("fanout")
        started = time.perf_counter()
        for i in range(0, n, in_flight):
            await w.room(i)
            await asyncio.gather(*[branch.publish(payload(j)) for j in range(i, min(n, i + in_flight))])
        await w.until(n)
        took = time.perf_counter() - started
        for sub in subs:
            await sub.stop()
        assert not w.missed, f"subscribers missed messages: {w.missed}"
    finally:
        await asyncio.gather(*[r.close() for r in readers])
    return n * subscribers / took


async def ts_hold_release(store: tinystore.Store, n: int) -> float:
    lock = store.lock("bench")
    started = time.perf_counter()
    for _ in range(n):
        async with lock.hold("k"):
            pass
    return n / (time.perf_counter() - started)


async def ts_child(how: str, where: str, n: int) -> None:
    """One of the contending processes: ``how`` is ``open`` (a directory) or ``connect`` (an address)."""
    async with (tinystore.open(where) if how == "open" else tinystore.connect(where)) as store:
        lock = store.lock("contended", wait="60s")
        await ready_then_go()
        started = time.monotonic()
        for _ in range(n):
            async with lock.hold("k"):
                pass
        await done(started)


# --- redis-py ----------------------------------------------------------------


def redis_sync(sock: str) -> Any:
    import redis

    return redis.Redis(unix_socket_path=sock)


def redis_async(sock: str) -> Any:
    import redis.asyncio

    return redis.asyncio.Redis(unix_socket_path=sock)


def rs_stream(sock: str, n: int, in_flight: int) -> float:
    """Synchronous: the publisher in this thread, the subscriber in another."""
    channel = f"stream-{in_flight}"
    r, sub = redis_sync(sock), redis_sync(sock)
    ps = sub.pubsub(ignore_subscribe_messages=True)
    ps.subscribe(channel)
    ps.get_message(timeout=5)  # the subscription's confirmation
    room = threading.Semaphore(WINDOW)

    def reader() -> None:
        for _ in range(n):
            m = None
            while m is None:
                m = ps.get_message(timeout=5)
            json.loads(m["data"])
            room.release()

    t = threading.Thread(target=reader)
    started = time.perf_counter()
    t.start()
    if in_flight == 1:
        for i in range(n):
            room.acquire()
            r.publish(channel, json.dumps(payload(i)))
    else:
        for i in range(0, n, in_flight):
            p = r.pipeline(transaction=False)
            for j in range(i, min(n, i + in_flight)):
                room.acquire()
                p.publish(channel, json.dumps(payload(j)))
            p.execute()
    t.join()
    took = time.perf_counter() - started
    ps.close()
    r.close()
    sub.close()
    return n / took


async def ra_stream(sock: str, n: int, in_flight: int) -> float:
    """asyncio: the subscriber a task of the same loop, as with tinystore."""
    channel = f"astream-{in_flight}"
    r, sub = redis_async(sock), redis_async(sock)
    ps = sub.pubsub(ignore_subscribe_messages=True)
    await ps.subscribe(channel)
    w = Window()

    async def reader() -> None:
        while w.delivered < n:
            m = await ps.get_message(timeout=5)
            if m is not None:
                json.loads(m["data"])
                w.deliver()

    task = asyncio.ensure_future(reader())
    started = time.perf_counter()
    if in_flight == 1:
        for i in range(n):
            await w.room(i)
            await r.publish(channel, json.dumps(payload(i)))
    else:
        for i in range(0, n, in_flight):
            await w.room(i)
            p = r.pipeline(transaction=False)
            for j in range(i, min(n, i + in_flight)):
                p.publish(channel, json.dumps(payload(j)))
            await p.execute()
    await task
    took = time.perf_counter() - started
    await ps.aclose()
    await r.aclose()
    await sub.aclose()
    return n / took


def rs_one_at_a_time(sock: str, n: int) -> float:
    r, sub = redis_sync(sock), redis_sync(sock)
    ps = sub.pubsub(ignore_subscribe_messages=True)
    ps.subscribe("one")
    ps.get_message(timeout=5)
    started = time.perf_counter()
    for i in range(n):
        r.publish("one", json.dumps(payload(i)))
        m = None
        while m is None:
            m = ps.get_message(timeout=5)
        json.loads(m["data"])
    took = time.perf_counter() - started
    ps.close()
    r.close()
    sub.close()
    return n / took


async def ra_one_at_a_time(sock: str, n: int) -> float:
    r, sub = redis_async(sock), redis_async(sock)
    ps = sub.pubsub(ignore_subscribe_messages=True)
    await ps.subscribe("aone")
    started = time.perf_counter()
    for i in range(n):
        await r.publish("aone", json.dumps(payload(i)))
        m = None
        while m is None:
            m = await ps.get_message(timeout=5)
        json.loads(m["data"])
    took = time.perf_counter() - started
    await ps.aclose()
    await r.aclose()
    await sub.aclose()
    return n / took


def rs_fanout(sock: str, n: int, in_flight: int, subscribers: int) -> float:
    """Synchronous: the publisher in this thread, each subscriber a thread
    reading its own connection with ``get_message`` (``listen()`` was slower
    here, 44,000 to 50,000 deliveries/s against 56,000)."""
    channel = "fanout"
    r = redis_sync(sock)
    clients = [redis_sync(sock) for _ in range(subscribers)]
    pss = [c.pubsub(ignore_subscribe_messages=True) for c in clients]
    for ps in pss:
        ps.subscribe(channel)
    while r.pubsub_numsub(channel)[0][1] < subscribers:
        time.sleep(0.001)
    delivered = [0] * subscribers

    def reader(k: int, ps: Any) -> None:
        for i in range(n):
            m = None
            while m is None:
                m = ps.get_message(timeout=5)
            json.loads(m["data"])
            delivered[k] = i + 1

    threads = [threading.Thread(target=reader, args=(k, ps)) for k, ps in enumerate(pss)]
    for t in threads:
        t.start()
    started = time.perf_counter()
    for i in range(0, n, in_flight):
        if i - min(delivered) >= WINDOW:
            while i - min(delivered) > WINDOW // 2:
                time.sleep(0.0005)
        p = r.pipeline(transaction=False)
        for j in range(i, min(n, i + in_flight)):
            p.publish(channel, json.dumps(payload(j)))
        p.execute()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    for ps, c in zip(pss, clients):
        ps.close()
        c.close()
    r.close()
    return n * subscribers / took


async def ra_fanout(sock: str, n: int, in_flight: int, subscribers: int) -> float:
    """asyncio: each subscriber a task of the same loop, as with tinystore,
    reading with ``listen()`` (``get_message(timeout=5)``, as the other rows
    read, was slower here: 32,000 deliveries/s against 53,000)."""
    channel = "afanout"
    r = redis_async(sock)
    clients = [redis_async(sock) for _ in range(subscribers)]
    pss = [c.pubsub(ignore_subscribe_messages=True) for c in clients]
    for ps in pss:
        await ps.subscribe(channel)
    while (await r.pubsub_numsub(channel))[0][1] < subscribers:
        await asyncio.sleep(0.001)
    w = FanWindow(subscribers)

    async def reader(k: int, ps: Any) -> None:
        got = 0
        async for m in ps.listen():
            json.loads(m["data"])
            got += 1
            w.deliver(k)
            if got == n:
                break

    tasks = [asyncio.ensure_future(reader(k, ps)) for k, ps in enumerate(pss)]
    started = time.perf_counter()
    for i in range(0, n, in_flight):
        await w.room(i)
        p = r.pipeline(transaction=False)
        for j in range(i, min(n, i + in_flight)):
            p.publish(channel, json.dumps(payload(j)))
        await p.execute()
    await asyncio.gather(*tasks)
    took = time.perf_counter() - started
    for ps, c in zip(pss, clients):
        await ps.aclose()
        await c.aclose()
    await r.aclose()
    return n * subscribers / took


def rs_hold_release(sock: str, n: int) -> float:
    r = redis_sync(sock)
    release = r.register_script(RELEASE)
    started = time.perf_counter()
    for i in range(n):
        token = f"t{i}"
        assert r.set("lock:bench", token, nx=True, px=30000)
        release(keys=["lock:bench"], args=[token])
    took = time.perf_counter() - started
    r.close()
    return n / took


async def ra_hold_release(sock: str, n: int) -> float:
    r = redis_async(sock)
    release = r.register_script(RELEASE)
    started = time.perf_counter()
    for i in range(n):
        token = f"t{i}"
        assert await r.set("lock:abench", token, nx=True, px=30000)
        await release(keys=["lock:abench"], args=[token])
    took = time.perf_counter() - started
    await r.aclose()
    return n / took


async def redis_child(sock: str, n: int) -> None:
    """One of the contending processes: spins on SET NX (Redis has no waiting)."""
    r = redis_sync(sock)
    release = r.register_script(RELEASE)
    me = os.getpid()
    await ready_then_go()
    started = time.monotonic()
    for i in range(n):
        token = f"{me}-{i}"
        while not r.set("lock:contended", token, nx=True, px=30000):
            pass
        release(keys=["lock:contended"], args=[token])
    await done(started)


# --- the floor ---------------------------------------------------------------


def echo(path: str) -> None:
    """Echoes each byte back, one connection at a time (the floor's other end)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    print("ready", flush=True)
    while True:
        c, _ = listener.accept()
        while True:
            b = c.recv(1)
            if not b:
                break
            c.sendall(b)
        c.close()


def floor_sync(path: str, n: int) -> float:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    started = time.perf_counter()
    for _ in range(n):
        s.sendall(b"x")
        s.recv(1)
    took = time.perf_counter() - started
    s.close()
    return n / took


async def floor_async(path: str, n: int) -> float:
    reader, writer = await asyncio.open_unix_connection(path)
    started = time.perf_counter()
    for _ in range(n):
        writer.write(b"x")
        await reader.readexactly(1)
    took = time.perf_counter() - started
    writer.close()
    return n / took


# --- processes ---------------------------------------------------------------


async def ready_then_go() -> None:
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def done(started: float) -> None:
    """Says when this process started and ended (CLOCK_MONOTONIC, one clock for
    all processes), then stays until every process is done."""
    print(started, time.monotonic(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def spawn(*args: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready", f"{args} did not start"
    return p


def stop(p: subprocess.Popen[str]) -> None:
    p.kill()
    p.wait()


def contend(*args: str) -> float:
    """Runs 4 contending processes at once; handoffs per second among them."""
    procs = [spawn(*args) for _ in range(4)]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    spans = []
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().split()
        spans.append((float(line[0]), float(line[1])))
    for p in procs:
        p.communicate("done\n", timeout=30)
        assert p.returncode == 0, f"{args} exited {p.returncode}"
    return 4 * N_PROCS / (max(e for _, e in spans) - min(s for s, _ in spans))


def child(role: str, args: List[str]) -> None:
    if role == "echo":
        return echo(args[0])
    if role == "owner":
        async def own() -> None:
            async with tinystore.open(args[0]):
                await ready_then_go()

        return asyncio.run(own())
    asyncio.run(ts_child(args[0], args[1], N_PROCS) if role == "tinystore" else redis_child(args[0], N_PROCS))


# --- the run -----------------------------------------------------------------


def best(f: Callable[[], float]) -> float:
    return max(f() for _ in range(BEST_OF))


def best_async(f: Callable[[], Coroutine[Any, Any, float]]) -> float:
    return best(lambda: asyncio.run(f()))


def redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout
    return next((w[2:] for w in out.split() if w.startswith("v=")), "?")


def main() -> None:
    import redis

    tmp = Path(tempfile.mkdtemp(prefix="tsb-"))
    procs: List[subprocess.Popen[Any]] = []
    try:
        redis_sock = str(tmp / "redis.sock")
        procs.append(
            subprocess.Popen(
                ["redis-server", "--port", "0", "--unixsocket", redis_sock, "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
            )
        )
        echo_sock = str(tmp / "echo.sock")
        procs.append(spawn("echo", echo_sock))
        owner_dir = tmp / "owned-elsewhere"
        procs.append(spawn("owner", str(owner_dir)))
        address = f"unix:{owner_dir / 'tinystore.sock'}"
        deadline = time.monotonic() + 10
        while not os.path.exists(redis_sock):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.01)
        redis_sync(redis_sock).ping()

        print(
            f"tinystore {tinystore.__version__} (Python {sys.version.split()[0]}), redis-py {redis.__version__} "
            f"against redis-server {redis_version()}; {os.cpu_count()} CPUs, load average "
            f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; best of {BEST_OF}\n"
        )
        fsync = best(lambda: floor_sync(echo_sock, 20_000))
        fasync = best_async(lambda: floor_async(echo_sock, 20_000))
        print(f"floor, a bare Unix-socket ping-pong between two Python processes: {fsync:,.0f} round trips/s "
              f"({1e6 / fsync:.1f} µs) with sockets, {fasync:,.0f}/s ({1e6 / fasync:.1f} µs) with asyncio streams\n")

        owned_dir = tmp / "owned-here"

        async def owned(f: Callable[[tinystore.Store], Awaitable[float]]) -> float:
            async with tinystore.open(owned_dir) as store:
                return await f(store)

        async def connected(f: Callable[[tinystore.Store], Awaitable[float]]) -> float:
            async with tinystore.connect(address) as store:
                return await f(store)

        rows: List[Tuple[str, float, float, float, str, float]] = []

        def row(tag: str, name: str, ts: Callable[[tinystore.Store], Awaitable[float]],
                rsync: Callable[[], float], rasync: Callable[[], Coroutine[Any, Any, float]], per_op: bool) -> None:
            if ONLY and tag not in ONLY:
                return
            # Rounds interleave the contenders, so a change of the machine's
            # load falls on all of them; each keeps its best round.
            o = c = s = a = floor = 0.0
            for _ in range(BEST_OF):
                o = max(o, asyncio.run(owned(ts)))
                c = max(c, asyncio.run(connected(ts)))
                s = max(s, rsync())
                a = max(a, asyncio.run(rasync()))
                floor = max(floor, floor_sync(echo_sock, 20_000)) if per_op else 0.0
            rows.append((name, o, c, max(s, a), "sync" if s >= a else "asyncio", floor))
            print(f"  {name}: owned {o:,.0f}/s, connected {c:,.0f}/s, redis-py sync {s:,.0f}/s, asyncio {a:,.0f}/s"
                  + (f"; floor {floor:,.0f} round trips/s" if per_op else ""), flush=True)

        row("stream", "publish→deliver, each publish awaited", lambda s: ts_stream(s, N_STREAM, 1),
            lambda: rs_stream(redis_sock, N_STREAM, 1), lambda: ra_stream(redis_sock, N_STREAM, 1), False)
        row("pipelined", "publish→deliver, 64 in flight", lambda s: ts_stream(s, N_STREAM, 64),
            lambda: rs_stream(redis_sock, N_STREAM, 64), lambda: ra_stream(redis_sock, N_STREAM, 64), False)
        row("fanout", f"fan-out, 64 in flight, {FAN_SUBSCRIBERS} subscribing connections (deliveries)",
            lambda s: ts_fanout(s, N_FAN, 64, FAN_SUBSCRIBERS),
            lambda: rs_fanout(redis_sock, N_FAN, 64, FAN_SUBSCRIBERS),
            lambda: ra_fanout(redis_sock, N_FAN, 64, FAN_SUBSCRIBERS), False)
        row("one", "publish→deliver, one at a time", lambda s: ts_one_at_a_time(s, N_ONE),
            lambda: rs_one_at_a_time(redis_sock, N_ONE), lambda: ra_one_at_a_time(redis_sock, N_ONE), True)
        row("hold", "hold+release, sequential", lambda s: ts_hold_release(s, N_HOLD),
            lambda: rs_hold_release(redis_sock, N_HOLD), lambda: ra_hold_release(redis_sock, N_HOLD), True)

        contended_dir = tmp / "contended"

        if not ONLY or "processes" in ONLY:
            o = c = s = 0.0
            for _ in range(BEST_OF):
                o = max(o, contend("tinystore", "open", str(contended_dir)))
                c = max(c, contend("tinystore", "connect", address))
                s = max(s, contend("redis", redis_sock))
            rows.append(("hold+release, 4 processes on one key (handoffs)", o, c, s, "sync", 0.0))
            print(f"  4 processes: owned {o:,.0f}/s, connected {c:,.0f}/s, redis-py {s:,.0f}/s", flush=True)
        print()

        print("| workload | owned | connected | redis-py | owned / redis-py | connected / redis-py "
              "| connected, in floor round trips |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, o, c, r, flavour, floor in rows:
            trips = f"{floor / c:.2f}" if floor else "-"
            print(f"| {name} | {o:,.0f}/s | {c:,.0f}/s | {r:,.0f}/s ({flavour}) | {o / r:.2f} | {c / r:.2f} | {trips} |")
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        child(sys.argv[1], sys.argv[2:])
    else:
        main()
