//! The runner process of a runner Pod; see [`tfops_operator::runner_process`].

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    tfops_operator::runner_process::main(&argv).await
}
