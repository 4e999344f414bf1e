//! The network layer: the wire's frames and messages, socket I/O, TLS,
//! spinning, the owner's files, the server and the client, and the
//! connection to an etcd cluster for cluster stores (`etcd/`).

pub(crate) mod client;
pub(crate) mod etcd;
pub(crate) mod files;
pub(crate) mod nats;
pub(crate) mod server;
pub(crate) mod socket;
pub mod spin;
pub(crate) mod tls;
pub mod wire;
