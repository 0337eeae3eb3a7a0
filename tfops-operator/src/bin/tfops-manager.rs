//! The tfops manager: reconciles `Terraform` objects in a cluster; see
//! [`tfops_operator::manager`] and `tfops-manager --help`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let flags = tfops_operator::manager::flags::Flags::parse();
    tfops_operator::manager::init_logs(flags.log_format);
    tfops_operator::manager::run(flags).await
}
