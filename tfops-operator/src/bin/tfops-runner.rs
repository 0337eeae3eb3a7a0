//! The runner process of a runner Pod; see [`tfops_operator::runner_process`].

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tfops_operator::runner_process::main().await
}
