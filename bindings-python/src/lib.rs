//! The python binding of tinystore (in progress).
