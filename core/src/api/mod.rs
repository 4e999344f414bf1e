//! The api layer: [`Store`](crate::Store) and its handles (subscription,
//! lease, lock, semaphore, database, typed channels).

pub(crate) mod backend;
pub(crate) mod channels;
pub mod cluster;
pub(crate) mod lease;
pub(crate) mod locks;
pub(crate) mod outbox;
pub(crate) mod publish;
pub mod sql;
pub mod status;
pub(crate) mod store;
pub(crate) mod subscription;
