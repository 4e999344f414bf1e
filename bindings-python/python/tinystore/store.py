"""Opening a store: the directory that channels, locks and databases live in."""

from __future__ import annotations

import json
import os
import sys
from types import TracebackType
from typing import Any, Generator, Optional, Type, TypeVar, Union, overload

from . import _aio, _native
from .channel import Channel
from ._status import StoreStatus
from .lock import Duration, Lock, Semaphore
from .sql import Database

T = TypeVar("T")


class Store:
    """A store: channels, locks, semaphores and SQL databases in one directory.

    Made by ``await tinystore.open(dir)`` or ``await tinystore.connect(address)``;
    both work with ``async with``. ``close()`` ends its subscriptions and lets
    held keys go.
    """

    __slots__ = ("_native", "_watch")

    def __init__(self, native: _native.NativeStore) -> None:
        self._native = native
        # Connected: the running loop reads the connection's socket itself.
        self._watch = _aio.LoopWatch(native) if native.connected else None

    @overload
    def channel(self, name: str) -> Channel[Any]: ...
    @overload
    def channel(self, name: str, type: type[T]) -> Channel[T]: ...

    def channel(self, name: str, type: Any = None) -> Channel[Any]:
        """The channel ``name``, carrying values of ``type``.

        ``type`` is a dataclass (nested dataclasses, lists, optionals and
        enums are read back as declared) or a type JSON carries as is
        (``dict``, ``list``, ``str``...); None for plain JSON values. Names
        are 1 to 64 of ``a-z 0-9 _ -``, starting with a letter or digit:
        raises ``InvalidError`` (a ``ValueError``) otherwise.
        """
        # The caller's names resolve the string annotations of dataclasses
        # defined inside a function.
        caller = sys._getframe(1)
        ns = {**caller.f_globals, **caller.f_locals}
        return Channel(self._native.branch(name), name, type, ns, self._watch)

    def lock(
        self,
        name: str,
        *,
        ttl: Optional[Duration] = None,
        max_hold: Optional[Duration] = None,
        wait: Optional[Duration] = None,
    ) -> Lock:
        """The lock ``name``: one holder of a key at a time, each lease with a fence.

        - ``ttl``: a lease over a connection lasts this long from its last
          renewal; renewed every third of it while its block runs. 1 s to
          1 h; default 30 s. A lease of the process that owns the store ends
          only with its block (or at ``max_hold``).
        - ``max_hold``: no lease outlasts this, owned or connected; default none.
        - ``wait``: how long ``hold`` waits for a key; default 10 s.

        Durations are strings (``"250ms"``, ``"30s"``, ``"2m"``, ``"1h"``,
        ``"1m30s"``), seconds or ``timedelta``. Raises ``InvalidError`` for a name or
        duration out of rule, ``ClosedError`` once the store is closed.

        Never waits: a connected store asks the owner in the background, and
        ``ConflictError`` (the name is a semaphore) comes from the first
        ``hold`` or ``try_hold`` at the latest (owned, from here).
        """
        return Lock(self._native.lock(name, None, ttl, max_hold, wait), self._watch)

    def semaphore(
        self,
        name: str,
        *,
        limit: int = 1,
        ttl: Optional[Duration] = None,
        max_hold: Optional[Duration] = None,
        wait: Optional[Duration] = None,
    ) -> Semaphore:
        """The semaphore ``name``: up to ``limit`` holders of a key at once
        (an int from 1 to 4294967295, default 1); permits have no fence.
        Options as :meth:`lock`. Raises ``InvalidError`` for a limit out of
        range; ``ConflictError`` when the name is a lock or a semaphore of
        another limit, from the first ``hold`` or ``try_hold`` at the latest
        (as :meth:`lock`); ``TypeError`` for a limit that is not an int."""
        if not isinstance(limit, int) or isinstance(limit, bool):
            # None would make a lock of it.
            raise TypeError(f"a semaphore's limit is an int from 1 to 4294967295, like 3; got {limit!r}")
        return Semaphore(self._native.lock(name, limit, ttl, max_hold, wait), limit, self._watch)

    async def database(
        self,
        name: str,
        *,
        migrations: Union[str, "os.PathLike[str]", None] = None,
        busy_timeout: Optional[Duration] = None,
    ) -> Database:
        """Opens the SQL database ``<dir>/<name>.db``, making it if needed.

        ``migrations`` is a folder of numbered ``.sql`` files
        (``0004_summaries.sql``), applied in order, each once, each in its own
        transaction. ``busy_timeout`` (default 5 s) is how long a writer waits
        for another. Raises ``SqlError`` when a migration fails (nothing of it
        stays applied), an applied file was edited, or a new file is numbered
        below one already applied (it would run out of order: renumber it).
        """
        mig = os.fspath(migrations) if migrations is not None else None
        native = await _aio.result(self._native.database(name, mig, busy_timeout))
        return Database(native, name)

    @property
    def dir(self) -> str:
        """The store directory."""
        return str(self._native.dir)

    @property
    def epoch(self) -> int:
        """This open's epoch: the high 64 bits of every fence it gives."""
        return self._native.epoch

    @property
    def closed(self) -> bool:
        return self._native.closed

    def status(self) -> StoreStatus:
        """What the store holds now: subscriptions and branches, held keys
        with their fences and waiters: a dict of JSON values, typed as
        :class:`tinystore.StoreStatus` (its shape comes from the core). Connected, it
        is asked of the owner (one round trip, waited for here). Raises
        ``ClosedError`` once the store is closed."""
        if self._watch is not None:
            # This thread waits for the answer here, so the loop cannot read
            # it: the engine does (the next call watches again).
            self._watch.detach()
        status: StoreStatus = json.loads(self._native.status_json())
        return status

    async def close(self) -> None:
        """Closes the store: subscriptions end, held keys are let go (their
        holders see their leases lost), waiters get ``ClosedError``. Over a
        connection, publishes already sent get their answers first (up to
        2 s; past that they raise ``ClosedError``). Messages the store took
        before ``close`` still reach this store's subscriptions (CHAN-01):
        their handlers get them after ``close`` returns, and each
        subscription's ``wait()`` returns after its last. Idempotent."""
        if self._watch is not None:
            self._watch.close()
        # Publishes already sent get their answers first (connected, up to
        # 2 s), so they resolve as delivered rather than as ClosedError.
        await _aio.result(self._native.close_settled())

    async def __aenter__(self) -> "Store":
        return self

    async def __aexit__(
        self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Store({self.dir!r}{', closed' if self.closed else ''})"


class Opening:
    """``await tinystore.open(dir)`` gives a :class:`Store`;
    ``async with tinystore.open(dir) as store:`` closes it at the end."""

    __slots__ = ("_start", "_store")

    def __init__(self, start: Any) -> None:
        self._start = start
        self._store: Optional[Store] = None

    async def _open(self) -> Store:
        _aio.engine_starting()
        return Store(await _aio.result(self._start()))

    def __await__(self) -> Generator[Any, None, Store]:
        return self._open().__await__()

    async def __aenter__(self) -> Store:
        self._store = await self._open()
        return self._store

    async def __aexit__(
        self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        if self._store is not None:
            await self._store.close()


def open(dir: Union[str, "os.PathLike[str]"]) -> Opening:
    """Opens the store in directory ``dir``, making it if needed.

    If no live process owns the directory, this one does: it keeps channels
    and locks in memory, writes the store's epoch to ``dir/kv.db`` and serves
    the store to other processes on ``dir/tinystore.sock``. If another process
    owns it, this connects to that one instead (the same API), and takes the
    store over if the owner goes away. A cluster store's address
    (``etcd://...``, docs/cluster.md) given as ``dir`` is connected to, with
    :func:`connect`'s defaults from the environment. Raises ``IoError`` when the directory
    cannot be made, locked or reached, ``SqlError`` when its ``kv.db`` is
    unreadable. Runs off the event loop.
    """
    path = os.fspath(dir)
    return Opening(lambda: _native.open(path))


def connect(
    address: str,
    *,
    token: Optional[str] = None,
    ca_file: Union[str, "os.PathLike[str]", None] = None,
    request_timeout: Optional[Duration] = None,
    etcd_user: Optional[str] = None,
    etcd_password: Optional[str] = None,
    etcd_cert: Union[str, "os.PathLike[str]", None] = None,
    etcd_key: Union[str, "os.PathLike[str]", None] = None,
    nats_user: Optional[str] = None,
    nats_password: Optional[str] = None,
    nats_token: Optional[str] = None,
    nats_credentials: Union[str, "os.PathLike[str]", None] = None,
    nats_cert: Union[str, "os.PathLike[str]", None] = None,
    nats_key: Union[str, "os.PathLike[str]", None] = None,
) -> Opening:
    """Connects to a store another process serves at ``address``; the same
    API as an owned store, reconnecting by itself when the connection drops.

    - ``"unix:PATH"``: a Unix socket (an owner serves ``unix:<dir>/tinystore.sock``).
    - ``"tcp:HOST:PORT"``: TCP, with a token (made with ``tinystore token new <dir>``).
    - ``"tls:HOST:PORT"``: TCP inside TLS, with a token and the PEM file of
      the certificate (or its CA) the store serves, checked for HOST (see
      docs/wire.md, "TLS").
    - ``"etcd://HOST:PORT,HOST:PORT/PREFIX"``: a cluster store, its locks,
      semaphores and fences in etcd under ``/PREFIX/`` (``etcds://`` for
      TLS, with ``ca_file``, and ``etcd_cert``/``etcd_key`` when the members
      ask for client certificates); etcd's user and password in
      ``etcd_user``/``etcd_password``. Its channels are on the NATS
      JetStream servers the address names (``?nats=nats://HOST:PORT,...``,
      ``tls://`` for TLS); its SQL databases are files on this machine (see
      docs/cluster.md).

    Keyword arguments, each defaulting to the environment so that a
    deployment can set them without code:

    - ``token``: a line of the owner's ``<dir>/tokens``, for ``tcp:`` and
      ``tls:``; default the environment variable ``TINYSTORE_TOKEN``. Two
      stores with two tokens can be connected from one process.
    - ``ca_file``: for ``tls:`` and ``etcds://``, the PEM file of the CA
      certificate(s) to trust (only these: no public roots); default
      ``TINYSTORE_CA``.
    - ``etcd_user`` and ``etcd_password``: for ``etcd://`` and ``etcds://``,
      etcd's own authentication (a user made with ``etcdctl user add``), two
      strings, both or neither; default ``TINYSTORE_ETCD_USER`` and
      ``TINYSTORE_ETCD_PASSWORD`` (none: no authentication).
    - ``etcd_cert`` and ``etcd_key``: for ``etcds://`` members that ask for
      client certificates (``--client-cert-auth``), this process's
      certificate and private key, PEM file paths, both or neither; default
      ``TINYSTORE_ETCD_CERT`` and ``TINYSTORE_ETCD_KEY``.
    - ``nats_user`` and ``nats_password``: for ``?nats=`` servers with
      ``authorization { users = [...] }``, both or neither; default
      ``TINYSTORE_NATS_USER`` and ``TINYSTORE_NATS_PASSWORD``.
    - ``nats_token``: for ``authorization { token: ... }``; default
      ``TINYSTORE_NATS_TOKEN``.
    - ``nats_credentials``: a NATS credentials file (JWT and nkey seed);
      default ``TINYSTORE_NATS_CREDS``.
    - ``nats_cert`` and ``nats_key``: for ``tls://`` NATS servers that
      verify clients, this process's certificate and private key, PEM file
      paths, both or neither (the CA is ``ca_file``); default
      ``TINYSTORE_NATS_CERT`` and ``TINYSTORE_NATS_KEY``.
    - ``request_timeout``: how long a request may go unanswered (beyond a
      hold's ``wait``) before it raises ``TimeoutError``: ``"5s"``, seconds,
      or a ``timedelta``; default 10 seconds.

    Raises ``InvalidError`` for an address or duration out of rule, ``tls:``
    or ``etcds://`` without a CA file, a user without a password (or a
    certificate without a key, or the other way round), or an unreadable
    etcd TLS file; ``IoError`` when nobody listens there or the CA file is
    unreadable; ``AuthError`` for a wrong or missing token, a wrong etcd user
    or password (or none where etcd has auth enabled), a certificate the CA
    does not vouch for, a client certificate etcd refused, or NATS
    credentials refused (the message says what to give);
    ``UnavailableError`` when no etcd member answered within the request
    timeout; ``ProtocolError`` when only one side speaks TLS. Runs off the
    event loop.

    ::

        store = await tinystore.connect("tls:db.example.com:7443", token=token, ca_file="ca.pem")
        store = await tinystore.connect("etcds://10.0.0.1:2379,10.0.0.2:2379/myapp", ca_file="ca.pem",
                                        etcd_user="app", etcd_password=password)
    """
    ca = None if ca_file is None else os.fspath(ca_file)
    cert = None if etcd_cert is None else os.fspath(etcd_cert)
    key = None if etcd_key is None else os.fspath(etcd_key)
    creds = None if nats_credentials is None else os.fspath(nats_credentials)
    ncert = None if nats_cert is None else os.fspath(nats_cert)
    nkey = None if nats_key is None else os.fspath(nats_key)
    return Opening(lambda: _native.connect(address, token, ca, request_timeout, etcd_user, etcd_password, cert, key,
                                           nats_user, nats_password, nats_token, creds, ncert, nkey))
