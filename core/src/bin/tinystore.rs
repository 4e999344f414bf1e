//! The `tinystore` command; it lives in the library as [`tinystore::cli::run`],
//! which every package's command calls.

fn main() -> std::process::ExitCode {
    let code = tinystore::cli::run(std::env::args_os());
    std::process::ExitCode::from(code.clamp(0, 255) as u8)
}
