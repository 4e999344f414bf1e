//! The node binding of tinystore (in progress).
