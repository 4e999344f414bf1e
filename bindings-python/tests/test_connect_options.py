"""`tinystore.connect`'s keyword arguments: token, CA file and request
timeout given per store, with the environment as the default (SEC-01), and
the `tinystore` command the wheel installs."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import tinystore


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served_with_token(dir: Path, token: str) -> Iterator[str]:
    """`tinystore serve` (the package's command) owning a store in `dir`
    whose only token is `data <token>`, on TCP; gives its address."""
    dir.mkdir(parents=True)
    (dir / "tokens").write_text(f"data {token}\n")
    port = free_port()
    owner = subprocess.Popen(
        [*COMMAND, "serve", str(dir), "--listen", f"tcp:127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert owner.stderr is not None
        line = owner.stderr.readline()
        assert "serving" in line, line
        yield f"tcp:127.0.0.1:{port}"
    finally:
        owner.terminate()
        owner.wait(10)


COMMAND = [sys.executable, "-m", "tinystore._cli"]


async def test_sec_01_two_stores_with_two_tokens_connected_from_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINYSTORE_TOKEN", raising=False)
    with served_with_token(tmp_path / "a", "token-of-a") as address_a, served_with_token(
        tmp_path / "b", "token-of-b"
    ) as address_b:
        a = await tinystore.connect(address_a, token="token-of-a")
        b = await tinystore.connect(address_b, token="token-of-b", request_timeout="5s")
        for store, dir in ((a, tmp_path / "a"), (b, tmp_path / "b")):
            assert os.path.realpath(store.status()["dir"]) == os.path.realpath(dir)
            await store.channel("numbers").publish(1)
        # Each token opens its own store only, and a wrong one is AuthError.
        with pytest.raises(tinystore.AuthError, match="token"):
            await tinystore.connect(address_a, token="token-of-b")
        with pytest.raises(tinystore.AuthError):
            await tinystore.connect(address_b)
        # The environment is the default; an argument wins over it.
        monkeypatch.setenv("TINYSTORE_TOKEN", "token-of-b")
        c = await tinystore.connect(address_b)
        d = await tinystore.connect(address_a, token="token-of-a")
        await c.channel("numbers").publish(2)
        await d.channel("numbers").publish(2)
        for s in (a, b, c, d):
            await s.close()


async def test_connect_checks_its_options(tmp_path: Path) -> None:
    with served_with_token(tmp_path / "s", "t") as address:
        with pytest.raises(tinystore.InvalidError, match="duration"):
            await tinystore.connect(address, token="t", request_timeout="soon")
        with pytest.raises(tinystore.IoError):
            await tinystore.connect("tls:127.0.0.1:1", token="t", ca_file=tmp_path / "missing.pem")
        with pytest.raises(TypeError):
            await tinystore.connect(address, "t")  # type: ignore[misc]  # keyword-only


def test_connect_documents_its_options_and_their_defaults() -> None:
    doc = tinystore.connect.__doc__ or ""
    for words in ("token", "ca_file", "request_timeout", "TINYSTORE_TOKEN", "TINYSTORE_CA", "10 seconds",
                  "etcd_user", "etcd_password", "TINYSTORE_ETCD_USER", "TINYSTORE_ETCD_PASSWORD",
                  "etcd_cert", "etcd_key", "TINYSTORE_ETCD_CERT", "TINYSTORE_ETCD_KEY", "AuthError",
                  "nats_user", "nats_password", "TINYSTORE_NATS_USER", "TINYSTORE_NATS_PASSWORD", "nats_token",
                  "TINYSTORE_NATS_TOKEN", "nats_credentials", "TINYSTORE_NATS_CREDS", "nats_cert", "nats_key"):
        assert words in doc, words


def test_the_tinystore_command_runs_the_cores_command_in_process(tmp_path: Path) -> None:
    run = COMMAND
    version = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"tinystore {tinystore.__version__} (wire protocol ")
    missing = subprocess.run([*run, "status", str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1
    assert "start one with `tinystore serve" in missing.stderr
    usage = subprocess.run([*run, "no-such-command"], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 2 and "no-such-command" in usage.stderr
