//! The network layer: the wire's frames and messages, socket I/O, TLS,
//! spinning, the owner's files, the server and the client.

pub(crate) mod client;
pub(crate) mod server;
pub mod spin;
pub(crate) mod tls;
pub mod wire;
