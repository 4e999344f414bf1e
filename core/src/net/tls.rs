//! TLS for `tls:HOST:PORT` addresses: rustls with the ring provider.
//!
//! The owner loads a certificate chain and its private key (PEM); a client
//! checks the owner's certificate against a CA file it is given (PEM), with
//! the server name taken from HOST. Clients still prove themselves with a
//! token, as over plain TCP. A connection's write side goes through a small
//! writer task ([`TlsHalf`]), because a TLS stream cannot be written from
//! any thread without awaiting, as the Unix and TCP halves can.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::Notify;

use crate::base::error::{Error, ErrorKind, Result};
use crate::runtime;

/// How long a TLS handshake may take, either side.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Bytes a connection's writer task may have waiting: past this its half
/// reports `WouldBlock`, so the [`Sink`](crate::net::socket::Sink) queues and
/// counts them (its pending bound holds over TLS too).
const WRITER_QUEUE: usize = 256 * 1024;

/// A TLS record header starts with this byte for a handshake (a ClientHello).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

// rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange);
// ring stays, the provider etcd's and NATS's clients are built with here
// (core/Cargo.toml), so a user's build of the crate prints no warning.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where an owner's certificate and key are when none are given:
/// `<dir>/tls/cert.pem` and `<dir>/tls/key.pem`.
pub(crate) fn default_files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("tls").join("cert.pem"), dir.join("tls").join("key.pem"))
}

const MAKE_ONE: &str = "docs/wire.md (TLS) shows how to make them with openssl";

fn read_pem(what: &str, path: &Path, hint: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(&format!("could not read the {what} {} ({hint})", path.display()), e))
}

/// The owner's TLS settings from a certificate chain (leaf first) and its
/// private key, both PEM files.
pub(crate) fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>> {
    let hint = format!(
        "a tls: address needs a certificate and its key in PEM: pass them (tinystore serve --cert FILE --key FILE, or store.serve_tls) or put them in <dir>/tls/cert.pem and key.pem; {MAKE_ONE}"
    );
    let pem = read_pem("certificate", cert, &hint)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::invalid(format!("{} is not a PEM certificate file ({e}); {MAKE_ONE}", cert.display())))?;
    if chain.is_empty() {
        return Err(Error::invalid(format!("{} holds no certificate (no BEGIN CERTIFICATE block); {MAKE_ONE}", cert.display())));
    }
    let pem = read_pem("private key", key, &hint)?;
    let key_der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        Error::invalid(format!("{} holds no private key in PEM (PKCS#8, PKCS#1 or SEC1) ({e}); {MAKE_ONE}", key.display()))
    })?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("TLS versions: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| {
            Error::invalid(format!(
                "the certificate {} and key {} do not make a TLS identity ({e}): give the key that belongs to the certificate",
                cert.display(),
                key.display()
            ))
        })?;
    Ok(Arc::new(config))
}

/// A client's TLS settings: who it trusts, and the file that said so (for errors).
#[derive(Clone)]
pub(crate) struct ClientTls {
    connector: tokio_rustls::TlsConnector,
    ca: PathBuf,
}

impl ClientTls {
    /// Trusts the certificates in the PEM file `ca` (or, with none, refuses:
    /// a store's certificate is private, so no public roots are trusted).
    pub(crate) fn load(address: &str, ca: Option<PathBuf>) -> Result<ClientTls> {
        let ca = ca.ok_or_else(|| {
            Error::invalid(format!(
                "{address} needs the CA certificate that signed the store's certificate, to check it: set TINYSTORE_CA to its PEM file (for a self-signed certificate, the certificate itself), or pass ConnectOptions::ca_file"
            ))
        })?;
        let pem = read_pem("CA file", &ca, "set TINYSTORE_CA to the PEM file of the CA that signed the store's certificate")?;
        let mut roots = rustls::RootCertStore::empty();
        let mut bad = None;
        for c in CertificateDer::pem_slice_iter(&pem) {
            match c.map_err(|e| e.to_string()).and_then(|c| roots.add(c).map_err(|e| e.to_string())) {
                Ok(()) => {}
                Err(e) => bad = Some(e),
            }
        }
        if roots.is_empty() {
            return Err(Error::invalid(format!(
                "the CA file {} holds no usable certificate{}: give the PEM file of the CA that signed the store's certificate",
                ca.display(),
                bad.map(|e| format!(" ({e})")).unwrap_or_default()
            )));
        }
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("TLS versions: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(ClientTls { connector: tokio_rustls::TlsConnector::from(Arc::new(config)), ca })
    }
}

/// Connects to `tls:HOST:PORT` and checks the owner's certificate.
///
/// Errors: `io` when nobody listens (retried), `auth` when the certificate
/// is not vouched for by the CA or not for HOST, `protocol` when the other
/// side does not speak TLS.
pub(crate) async fn dial(hp: &str, tls: &ClientTls) -> Result<(Box<dyn AsyncRead + Send + Unpin>, TlsHalf)> {
    let host = hp.rsplit_once(':').map_or(hp, |(h, _)| h);
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let name = ServerName::try_from(host.to_owned())
        .map_err(|_| Error::invalid(format!("tls:{hp}: {host:?} is not a host name or IP address a certificate can name")))?;
    let s = tokio::net::TcpStream::connect(hp).await.map_err(|e| Error::io(&format!("could not connect to tls:{hp}"), e))?;
    s.set_nodelay(true).ok();
    let stream = match tokio::time::timeout(HANDSHAKE, tls.connector.connect(name, s)).await {
        Err(_) => return Err(Error::new(ErrorKind::Io, format!("tls:{hp} did not finish the TLS handshake within 10s"))),
        Ok(Err(e)) => return Err(handshake_error(hp, &tls.ca, e)),
        Ok(Ok(s)) => s,
    };
    Ok(split(tokio_rustls::TlsStream::Client(stream)))
}

/// What a failed client handshake means, and what to do.
fn handshake_error(hp: &str, ca: &Path, e: io::Error) -> Error {
    let tls = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(why)) => {
            let fix = if format!("{why:?}").contains("CaUsedAsEndEntity") {
                "the store's certificate is marked as a CA (basicConstraints CA:TRUE), which TLS refuses as a server's own: make it again with basicConstraints CA:FALSE (openssl req ... -addext basicConstraints=critical,CA:FALSE; see docs/wire.md)".to_owned()
            } else {
                format!(
                    "set TINYSTORE_CA to the CA file that signed the store's certificate (now {}), and connect by a name or IP the certificate lists",
                    ca.display()
                )
            };
            Error::new(ErrorKind::Auth, format!("the store at tls:{hp} showed a certificate this client does not trust ({why}): {fix}"))
        }
        Some(other) => Error::new(
            ErrorKind::Protocol,
            format!("tls:{hp} did not speak TLS with this client ({other}): if it is a plain TCP listener, connect with tcp:{hp}"),
        ),
        None => Error::io(&format!("the TLS handshake with tls:{hp} failed"), e),
    }
}

/// The owner's side of a new TLS connection: a client that speaks plain
/// frames gets one error frame telling it to use TLS, then is closed;
/// anything else that is not TLS is closed. `None` then.
pub(crate) async fn accept(
    mut s: tokio::net::TcpStream,
    acceptor: &tokio_rustls::TlsAcceptor,
) -> Option<(Box<dyn AsyncRead + Send + Unpin>, TlsHalf)> {
    s.set_nodelay(true).ok();
    let mut first = [0u8; 1];
    match tokio::time::timeout(HANDSHAKE, s.peek(&mut first)).await {
        Ok(Ok(1)) => {}
        _ => return None,
    }
    if first[0] != TLS_HANDSHAKE_RECORD {
        refuse_plain(&mut s).await;
        return None;
    }
    match tokio::time::timeout(HANDSHAKE, acceptor.accept(s)).await {
        Ok(Ok(stream)) => Some(split(tokio_rustls::TlsStream::Server(stream))),
        _ => None,
    }
}

/// Tells a plain-TCP client, in its own framing, that this address is TLS.
async fn refuse_plain(s: &mut tokio::net::TcpStream) {
    use tokio::io::AsyncReadExt;
    let e = Error::new(
        ErrorKind::Protocol,
        "this address speaks TLS: connect with tls:HOST:PORT (not tcp:) and set TINYSTORE_CA to the CA file that signed the store's certificate",
    );
    let frame = crate::net::wire::frame(&crate::net::wire::Reply { id: Some(0), err: Some((&e).into()), ..Default::default() });
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        s.write_all(&frame).await?;
        s.shutdown().await?;
        // Read what the client sent until it closes, so closing does not
        // reset the connection before it reads the answer.
        let mut sink = [0u8; 4096];
        let mut left = 1 << 20;
        while left > 0 {
            match s.read(&mut sink).await? {
                0 => break,
                n => left -= n.min(left),
            }
        }
        io::Result::Ok(())
    })
    .await;
}

/// Splits a TLS stream into a frame reader's half and a [`Sink`](crate::net::socket::Sink)'s.
fn split(s: tokio_rustls::TlsStream<tokio::net::TcpStream>) -> (Box<dyn AsyncRead + Send + Unpin>, TlsHalf) {
    let (r, w) = tokio::io::split(s);
    (Box::new(r), TlsHalf::start(w))
}

/// The write side of a TLS connection: bytes are queued (up to
/// [`WRITER_QUEUE`]) for a task that writes them through the TLS stream.
/// Dropping it writes what is queued, then ends the TLS session and the
/// socket's write side, as dropping a Unix or TCP half does.
pub(crate) struct TlsHalf {
    sh: Arc<Shared>,
}

struct Shared {
    st: Mutex<Queue>,
    /// Wakes the writer: bytes were queued, or the half was dropped.
    work: Notify,
    /// Wakes those waiting for room: the writer wrote, or failed.
    room: Notify,
    /// The half was dropped: a write in progress has a grace period from now.
    closing: Notify,
}

#[derive(Default)]
struct Queue {
    buf: Vec<u8>,
    broken: bool,
    closed: bool,
}

impl TlsHalf {
    fn start(w: tokio::io::WriteHalf<tokio_rustls::TlsStream<tokio::net::TcpStream>>) -> TlsHalf {
        let sh = Arc::new(Shared { st: Mutex::new(Queue::default()), work: Notify::new(), room: Notify::new(), closing: Notify::new() });
        runtime::spawn(writer(sh.clone(), w));
        TlsHalf { sh }
    }

    /// Queues as much of `b` as there is room for; `WouldBlock` when none.
    pub(crate) fn try_write(&self, b: &[u8]) -> io::Result<usize> {
        let mut s = self.sh.st.lock();
        if s.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let n = b.len().min(WRITER_QUEUE.saturating_sub(s.buf.len()));
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        s.buf.extend_from_slice(&b[..n]);
        drop(s);
        self.sh.work.notify_one();
        Ok(n)
    }

    /// Waits until [`try_write`](TlsHalf::try_write) would take a byte.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        loop {
            let n = self.sh.room.notified();
            {
                let s = self.sh.st.lock();
                if s.broken {
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                if s.buf.len() < WRITER_QUEUE {
                    return Ok(());
                }
            }
            n.await;
        }
    }
}

impl Drop for TlsHalf {
    fn drop(&mut self) {
        self.sh.st.lock().closed = true;
        self.sh.work.notify_one();
        self.sh.closing.notify_one();
    }
}

async fn writer(sh: Arc<Shared>, mut w: tokio::io::WriteHalf<tokio_rustls::TlsStream<tokio::net::TcpStream>>) {
    let mut spare = Vec::new();
    loop {
        let taken = {
            let mut s = sh.st.lock();
            (!s.buf.is_empty() || s.closed).then(|| (std::mem::replace(&mut s.buf, std::mem::take(&mut spare)), s.closed))
        };
        let Some((buf, closed)) = taken else {
            sh.work.notified().await;
            continue;
        };
        if buf.is_empty() {
            // Dropped with nothing left: say goodbye (close_notify) and stop.
            let _ = tokio::time::timeout(Duration::from_secs(2), w.shutdown()).await;
            return;
        }
        let write = async {
            w.write_all(&buf).await?;
            w.flush().await
        };
        // Once the half is dropped, a peer that stops reading gets 10 s
        // more, not forever.
        let grace = async {
            if !closed {
                sh.closing.notified().await;
            }
            tokio::time::sleep(Duration::from_secs(10)).await
        };
        let ok = tokio::select! {
            r = write => r.is_ok(),
            _ = grace => false,
        };
        spare = buf;
        spare.clear();
        if !ok {
            let mut s = sh.st.lock();
            s.broken = true;
            s.buf = Vec::new();
            drop(s);
            sh.room.notify_waiters();
            return;
        }
        sh.room.notify_waiters();
    }
}
