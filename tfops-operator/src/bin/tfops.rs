//! The `tfops` command line; see [`tfops_operator::cli`] and `tfops --help`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tfops_operator::cli::main().await
}
