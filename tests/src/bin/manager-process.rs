//! The manager as the e2e tests run it: the same process as `tfops-manager`
//! (`tfops_operator::manager`), built with this crate so that its tests run the manager of the
//! very build they test.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let flags = tfops_operator::manager::flags::Flags::parse();
    tfops_operator::manager::init_logs(flags.log_format);
    tfops_operator::manager::run(flags).await
}
