//! The `tinystore` command, for the Go module's `cmd/tinystore`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use crate::args::bytes;
use crate::error::quiet;

/// Runs the `tinystore` command (`tinystore::cli::run`) on this thread
/// until it is done and returns its exit status. `args` holds `args_len`
/// bytes: each argument followed by a NUL byte, the program's name first.
/// A panic gives 70.
///
/// First it puts SIGINT, SIGTERM and SIGHUP back to their default action:
/// the Go runtime's handlers for them would be chained to by the
/// command's own (which `serve`, `channels subscribe` and `lock hold`
/// install) on threads Go did not make. So Ctrl+C ends a command that
/// installs none, and stops the others as it does in the core's binary.
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
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: setting a signal's action to its default.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        tinystore::cli::run(args)
    })
}
