//! The go binding of tinystore (in progress).
