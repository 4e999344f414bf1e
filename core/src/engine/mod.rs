//! The engine: channels and locks in memory, with their fences and timers.
//! No socket, file or client: the layers above reach it.

pub(crate) mod channels;
pub(crate) mod locks;
