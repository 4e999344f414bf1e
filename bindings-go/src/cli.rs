//! The `tinystore` command, for the Go module's `cmd/tinystore`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use crate::args::bytes;
use crate::error::quiet;

/// Runs the `tinystore` command (`tinystore::cli::run`) on this thread
/// until it is done and returns its exit status. `args` holds `args_len`
/// bytes: each argument followed by a NUL byte, the program's name first.
/// A panic gives 70. The command takes SIGINT, SIGTERM and SIGHUP over
/// from the Go runtime (see `tinystore::cli::run`).
///
/// # Safety
/// `(args, args_len)` readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_cli(args: *const u8, args_len: usize) -> i32 {
    quiet(70, || {
        let all = unsafe { bytes(args, args_len) };
        let args: Vec<OsString> = all.split(|b| *b == 0).map(|a| OsString::from_vec(a.to_vec())).collect();
        // The split leaves an empty item after the last NUL.
        let args = match args.split_last() {
            Some((last, rest)) if last.is_empty() => rest.to_vec(),
            _ => args,
        };
        tinystore::cli::run(args)
    })
}
