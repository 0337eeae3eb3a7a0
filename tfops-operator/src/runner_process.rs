//! The runner process of a runner Pod (the `tfops-runner` binary): flags as
//! [`tfops_runner::process`] reads them, and, in a cluster (a kubeconfig in
//! `TFOPS_KUBECONFIG`, or the in-cluster ServiceAccount when `KUBERNETES_SERVICE_HOST` is set),
//! the Kubernetes stores of `tfops-kube`, so that plans and outputs are written with the Pod's
//! own identity. Elsewhere it runs without them and refuses the store commands.

use std::sync::Arc;

use anyhow::Context;

/// The Kubernetes client of the Pod's identity, when there is one.
async fn cluster_client() -> anyhow::Result<Option<kube::Client>> {
    let config = if let Some(path) = std::env::var_os("TFOPS_KUBECONFIG") {
        let kubeconfig = kube::config::Kubeconfig::read_from(&path)
            .with_context(|| format!("reading TFOPS_KUBECONFIG {}", path.to_string_lossy()))?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .context("loading TFOPS_KUBECONFIG")?
    } else if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        kube::Config::incluster().context("loading the in-cluster configuration")?
    } else {
        return Ok(None);
    };
    Ok(Some(
        kube::Client::try_from(config).context("building the Kubernetes client")?,
    ))
}

/// Runs the runner process with `argv` (without the program name) until SIGTERM.
///
/// # Errors
/// Bad flags, TLS files, a Kubernetes configuration that cannot be read, serving.
pub async fn main(argv: &[String]) -> anyhow::Result<()> {
    let Some(args) = tfops_runner::process::parse_args(argv)? else {
        println!("{}", tfops_runner::process::USAGE);
        return Ok(());
    };
    let stores = cluster_client().await?.map(|client| {
        Arc::new(tfops_kube::KubeRunnerStores::new(client)) as Arc<dyn tfops_runner::stores::Stores>
    });
    tfops_runner::process::run_with(args, stores)
        .await
        .context("tfops-runner")
}
