//! The runner image of the test cluster's node agent: the same process as the `tfops-runner` binary
//! (`tfops_operator::runner_process`), built with this crate so that its tests run the
//! runner of the very build they test (cargo builds a crate's binaries for its tests).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tfops_operator::runner_process::main().await
}
