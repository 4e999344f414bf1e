//! NATS connect options of cluster stores against a real nats-server
//! started with authorization or TLS (one node, JetStream, `replicas=1`):
//! the right user and password, token, or CA and client certificate
//! publish and subscribe; wrong or missing ones are `auth` errors saying
//! what to give (docs/cluster.md).

mod common;
mod etcd;
mod nats;

use std::time::Duration;

use etcd::Cluster;
use nats::Nats;
use tinystore::{ConnectOptions, Delivery, Store};

fn address(c: &Cluster, n: &Nats, prefix: &str, scheme: &str) -> String {
    format!("{}?nats={scheme}://127.0.0.1:{}&replicas=1", c.address(prefix), n.nodes[0].port)
}

fn opts() -> ConnectOptions {
    ConnectOptions::new().request_timeout(Duration::from_secs(30))
}

/// A publish reaches a subscription of the same store.
fn round_trip(store: &Store) {
    let events = store.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    events.under(1).publish(&7).unwrap();
    match it.next_timeout(Duration::from_secs(10)).unwrap() {
        Some(Delivery::Message(m)) => assert_eq!(m.value, 7),
        other => panic!("{other:?}"),
    }
}

fn refused(address: &str, o: ConnectOptions) -> tinystore::Error {
    let e = Store::connect_with(address, o).err().expect("refused");
    assert_eq!(e.code(), "auth", "{e}");
    assert!(e.message().contains("nats_user") && e.message().contains("nats_token") && e.message().contains("TINYSTORE_NATS_CREDS"), "says what to give: {e}");
    e
}

#[test]
fn store_cluster_nats_user_and_password_publish_and_subscribe_and_wrong_ones_are_auth() {
    let c = Cluster::shared();
    let n = Nats::start_single("authorization { users = [ { user: app, password: s3cret } ] }");
    let a = address(&c, &n, "natsuser", "nats");
    round_trip(&Store::connect_with(&a, opts().nats_user("app", "s3cret")).unwrap());
    let e = refused(&a, opts().nats_user("app", "wrong"));
    assert!(e.message().contains("\"app\""), "names the user given: {e}");
    let e = refused(&a, opts());
    assert!(e.message().contains("no credentials were given"), "{e}");
    let e = Store::connect_with(&a, opts().nats_user_parts(Some("app".into()), None)).err().unwrap();
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("NATS password"), "{e}");
}

#[test]
fn store_cluster_nats_token_publishes_and_subscribes_and_a_wrong_one_is_auth() {
    let c = Cluster::shared();
    let n = Nats::start_single("authorization { token: \"t0ken-42\" }");
    let a = address(&c, &n, "natstoken", "nats");
    round_trip(&Store::connect_with(&a, opts().nats_token("t0ken-42")).unwrap());
    let e = refused(&a, opts().nats_token("other"));
    assert!(e.message().contains("a token was given"), "{e}");
    refused(&a, opts());
}

/// `tls://` servers that verify clients: the CA (`ca_file`) and this
/// process's certificate (`nats_identity`) publish and subscribe; without
/// the certificate, or with a CA that did not sign the server's, the
/// connect is an `auth` error at once naming the option to give; a
/// certificate with `nats://` servers is `invalid`.
#[test]
fn store_cluster_nats_tls_with_ca_and_client_certificate_publishes_and_subscribes() {
    let c = Cluster::shared();
    let dir = tempfile::tempdir().unwrap();
    let p = etcd::pki(dir.path());
    let n = Nats::start_single(&format!("tls {{ cert_file: {:?}, key_file: {:?}, ca_file: {:?}, verify: true }}", p.member_cert, p.member_key, p.ca));
    let a = address(&c, &n, "natstls", "tls");
    let good = || opts().ca_file(&p.ca).nats_identity(&p.client_cert, &p.client_key);
    round_trip(&Store::connect_with(&a, good()).unwrap());
    let quick = || ConnectOptions::new().request_timeout(Duration::from_secs(5));
    let t = std::time::Instant::now();
    let e = Store::connect_with(&a, quick().ca_file(&p.ca)).err().expect("no client certificate");
    assert_eq!(e.code(), "auth", "{e}");
    assert!(e.message().contains("nats_identity") && e.message().contains("none was given"), "{e}");
    let e = Store::connect_with(&a, quick().ca_file(&p.other_ca).nats_identity(&p.client_cert, &p.client_key)).err().expect("a CA that signed nothing");
    assert_eq!(e.code(), "auth", "{e}");
    assert!(e.message().contains("not trusted") && e.message().contains("ca_file"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "refused at once, not retried: {:?}", t.elapsed());
    let e = Store::connect_with(&address(&c, &n, "natstls", "nats"), good()).err().unwrap();
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("tls://"), "{e}");
}
