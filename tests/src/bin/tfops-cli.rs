//! The `tfops` CLI as the e2e tests run it: the same `main` as the `tfops` binary
//! (`tfops_operator::cli::main`), built with this crate so that its tests run the CLI of the
//! very build they test.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tfops_operator::cli::main().await
}
