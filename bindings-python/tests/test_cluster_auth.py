"""`tinystore.connect`'s etcd options on real etcd clusters this file starts:
etcd's user and password (``etcd_user``/``etcd_password``) on a cluster with
auth enabled, and a client certificate (``etcd_cert``/``etcd_key``) on
members that ask for one (--client-cert-auth); the environment as default."""

from __future__ import annotations

from typing import Iterator

import pytest

import tinystore

from conftest import EtcdCluster


@pytest.fixture(scope="module")
def auth_cluster() -> Iterator[EtcdCluster]:
    """A cluster of its own (auth would lock out the shared one's tests)
    with etcd's auth enabled, its only user `root` with password `rootpw`."""
    c = EtcdCluster()
    try:
        for args in (("user", "add", "root:rootpw"), ("role", "add", "root"),
                     ("user", "grant-role", "root", "root"), ("auth", "enable")):
            c.etcdctl(*args)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def tls_cluster() -> Iterator[EtcdCluster]:
    c = EtcdCluster(tls=True)
    yield c
    c.stop()


async def hold_once(store: tinystore.Store) -> int:
    async with store.lock("l", ttl="2s").hold("k") as lease:
        return lease.fence


async def test_cluster_connect_with_the_etcd_user_and_password_holds_and_a_wrong_password_is_auth(
    auth_cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINYSTORE_ETCD_USER", raising=False)
    monkeypatch.delenv("TINYSTORE_ETCD_PASSWORD", raising=False)
    address = auth_cluster.address("auth")
    store = await tinystore.connect(address, etcd_user="root", etcd_password="rootpw")
    fence = await hold_once(store)
    assert fence >> 64 == store.epoch
    with pytest.raises(tinystore.AuthError, match="authentication failed"):
        await tinystore.connect(address, etcd_user="root", etcd_password="wrong")
    with pytest.raises(tinystore.AuthError):
        await tinystore.connect(address)  # auth enabled, no user given
    # The environment is the default; the arguments win over it.
    monkeypatch.setenv("TINYSTORE_ETCD_USER", "root")
    monkeypatch.setenv("TINYSTORE_ETCD_PASSWORD", "rootpw")
    from_env = await tinystore.connect(address)
    assert await hold_once(from_env) > fence
    with pytest.raises(tinystore.AuthError):
        await tinystore.connect(address, etcd_user="root", etcd_password="wrong")
    for s in (store, from_env):
        await s.close()


async def test_cluster_connect_with_a_user_but_no_password_is_invalid_naming_it() -> None:
    # The core checks it before asking any member: nothing listens on port 1.
    with pytest.raises(tinystore.InvalidError, match="without the etcd password"):
        await tinystore.connect("etcd://127.0.0.1:1/half", etcd_user="root")
    with pytest.raises(tinystore.InvalidError, match="without the etcd client key"):
        await tinystore.connect("etcds://127.0.0.1:1/half", ca_file="ca.pem", etcd_cert="client.pem")
    with pytest.raises(tinystore.InvalidError, match="without the NATS password"):
        await tinystore.connect("etcd://127.0.0.1:1/half?nats=nats://127.0.0.1:1", nats_user="app")
    with pytest.raises(tinystore.InvalidError, match="without the NATS client certificate"):
        await tinystore.connect("etcd://127.0.0.1:1/half?nats=tls://127.0.0.1:1", ca_file="ca.pem", nats_key="key.pem")


async def test_cluster_connect_with_a_client_certificate_holds_and_without_one_the_error_names_it(
    tls_cluster: EtcdCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("TINYSTORE_CA", "TINYSTORE_ETCD_CERT", "TINYSTORE_ETCD_KEY"):
        monkeypatch.delenv(name, raising=False)
    pki = tls_cluster.pki
    assert pki is not None
    address = tls_cluster.address("tls")
    assert address.startswith("etcds://")
    store = await tinystore.connect(address, ca_file=pki["ca"], etcd_cert=pki["client"], etcd_key=pki["client-key"])
    fence = await hold_once(store)
    with pytest.raises((tinystore.AuthError, tinystore.UnavailableError), match="client certificate"):
        await tinystore.connect(address, ca_file=pki["ca"], request_timeout="3s")
    with pytest.raises(tinystore.AuthError, match="CA"):
        await tinystore.connect(address, ca_file=pki["other-ca"], etcd_cert=pki["client"], etcd_key=pki["client-key"])
    # The environment is the default.
    monkeypatch.setenv("TINYSTORE_CA", str(pki["ca"]))
    monkeypatch.setenv("TINYSTORE_ETCD_CERT", str(pki["client"]))
    monkeypatch.setenv("TINYSTORE_ETCD_KEY", str(pki["client-key"]))
    from_env = await tinystore.connect(address)
    assert await hold_once(from_env) > fence
    for s in (store, from_env):
        await s.close()
