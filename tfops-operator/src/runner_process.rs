//! The runner process of a runner Pod (the `tfops-runner` binary): flags as
//! [`tfops_runner::process`] reads them, and, in a cluster (a kubeconfig in
//! `TFOPS_KUBECONFIG`, or the in-cluster ServiceAccount when `KUBERNETES_SERVICE_HOST` is set
//! and the Pod has a token),
//! the Kubernetes stores of `tfops-kube`, so that plans and outputs are written with the Pod's
//! own identity. Elsewhere it runs without them and refuses the store commands.

use std::sync::Arc;

use anyhow::Context;

use crate::logs::LogFormat;

/// Where a Pod's ServiceAccount token is. A Pod without one (a pull request's runner:
/// `automountServiceAccountToken: false`) still has the API server's address in its
/// environment; it runs without stores.
const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// The Kubernetes client of the Pod's identity, when there is one.
async fn cluster_client() -> anyhow::Result<Option<kube::Client>> {
    let config = if let Some(path) = std::env::var_os("TFOPS_KUBECONFIG") {
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)
            .with_context(|| format!("reading TFOPS_KUBECONFIG {}", path.to_string_lossy()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .context("loading TFOPS_KUBECONFIG")?
    } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::path::Path::new(SERVICE_ACCOUNT_TOKEN).exists()
    {
        kube::Config::incluster().context("loading the in-cluster configuration")?
    } else {
        return Ok(None);
    };
    Ok(Some(
        kube::Client::try_from(config).context("building the Kubernetes client")?,
    ))
}

/// The runner process's command line: [`tfops_runner::process::Args`] and the log format.
#[derive(Debug, Clone, clap::Args)]
pub struct RunnerCommand {
    /// The runner's own flags.
    #[command(flatten)]
    pub args: tfops_runner::process::Args,
    /// Log format (`json` in a runner Pod, set by the controller).
    #[arg(long, env = "TFOPS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `tfops-runner`: the runner's flags and `--log-format`.
#[derive(Debug, clap::Parser)]
#[command(
    name = "tfops-runner",
    version,
    about = "The tfops runner: runs Terraform or OpenTofu for the tfops controller, over gRPC with mutual TLS"
)]
struct RunnerBinary {
    #[command(flatten)]
    command: RunnerCommand,
}

/// The `tfops-runner` binary's `main`: flags (clap ends the process on `--help` or a bad
/// flag), logs, [`run`].
///
/// # Errors
/// As [`run`].
pub async fn main() -> anyhow::Result<()> {
    use clap::Parser;
    run(RunnerBinary::parse().command).await
}

/// Runs the runner process until SIGTERM, with the Kubernetes stores when in a cluster.
///
/// # Errors
/// TLS files, a Kubernetes configuration that cannot be read, serving.
pub async fn run(command: RunnerCommand) -> anyhow::Result<()> {
    crate::logs::init(command.log_format, "info");
    let stores = cluster_client().await?.map(|client| {
        Arc::new(tfops_kube::KubeRunnerStores::new(client)) as Arc<dyn tfops_runner::stores::Stores>
    });
    tfops_runner::process::run_with(command.args, stores)
        .await
        .context("tfops-runner")
}
