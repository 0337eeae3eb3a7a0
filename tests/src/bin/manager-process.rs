//! The manager as the e2e tests run it: the same process as `tfops-manager`
//! (`tfops_operator::manager::main`), built with this crate so that its tests run the manager
//! of the very build they test.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tfops_operator::manager::main().await
}
