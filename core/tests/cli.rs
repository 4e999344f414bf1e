//! The `tinystore` command as a library function (`tinystore::cli::run`),
//! which every package's command calls, and the binary that wraps it.

use std::process::Command;

#[test]
fn version_names_the_crate_version_the_wire_protocol_and_the_build() {
    let out = Command::new(env!("CARGO_BIN_EXE_tinystore")).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    let want = format!("tinystore {} (wire protocol {}, {build} build)\n", tinystore::version(), tinystore::wire::PROTOCOL_VERSION);
    assert_eq!(text, want);
    assert_eq!(format!("tinystore {}\n", tinystore::cli::version_line()), want);
}

#[test]
fn run_returns_the_exit_status_instead_of_exiting() {
    assert_eq!(tinystore::cli::run(["tinystore", "--version"]), 0);
    assert_eq!(tinystore::cli::run(["tinystore", "no-such-command"]), 2, "a usage error");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    assert_eq!(tinystore::cli::run(["tinystore".as_ref(), "status".as_ref(), missing.as_os_str()]), 1, "no owner to ask");
}

#[test]
fn the_binary_passes_on_the_status_of_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tinystore")).arg("status").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("start one with `tinystore serve"), "{err}");
}
