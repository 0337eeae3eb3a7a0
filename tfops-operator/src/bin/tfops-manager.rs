//! The tfops manager: reconciles `Terraform` objects in a cluster; see
//! [`tfops_operator::manager`] and `tfops-manager --help`.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tfops_operator::manager::main().await
}
