//! The runner process of a runner Pod; see [`tfops_runner::process`] for its flags.

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(args) = tfops_runner::process::parse_args(&argv)? else {
        println!("{}", tfops_runner::process::USAGE);
        return Ok(());
    };
    tfops_runner::process::run(args)
        .await
        .context("tfops-runner")
}
