//! Starts the loopback API server (a test double, see `tests::cluster`) and, when images are
//! given, the kubelet stand-in; writes an admin kubeconfig, and serves until Ctrl-C, so that
//! anyone can point kubectl at it.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// A Kubernetes API server test double on 127.0.0.1, with an optional kubelet that runs Pods
/// as local processes.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = "loopback.kubeconfig")]
    kubeconfig: PathBuf,
    /// `IMAGE=BINARY`: Pods of this image (tag ignored) run this local binary; repeatable.
    /// Without any, no kubelet runs and Pods stay Pending.
    #[arg(long = "image", value_name = "IMAGE=BINARY")]
    images: Vec<String>,
    /// Where the kubelet keeps Pod directories (default: a temporary directory).
    #[arg(long)]
    pod_root: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut images = std::collections::BTreeMap::new();
    for pair in &args.images {
        let (image, binary) = pair
            .split_once('=')
            .with_context(|| format!("--image {pair}: expected IMAGE=BINARY"))?;
        let binary = std::fs::canonicalize(binary)
            .with_context(|| format!("--image {pair}: {binary} does not exist"))?;
        images.insert(image.to_string(), binary);
    }
    let temp = tempfile::tempdir()?;
    let kubelet = (!images.is_empty()).then(|| tests::cluster::kubelet::KubeletConfig {
        images,
        root: args
            .pod_root
            .clone()
            .unwrap_or_else(|| temp.path().to_path_buf()),
        base_env: std::env::vars()
            .filter(|(k, _)| k == "PATH" || k.starts_with("TFOPS_TERRAFORM"))
            .collect(),
    });
    let with_kubelet = kubelet.is_some();
    let cluster =
        tests::cluster::LoopbackCluster::start_with(tests::cluster::Options { kubelet }).await?;
    std::fs::write(&args.kubeconfig, cluster.kubeconfig())
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;
    println!(
        "loopback API server on https://{} (a test double: see the README for what it serves)\nkubelet: {}\nkubeconfig: {}\ntry: kubectl --kubeconfig {} get namespaces\nCtrl-C stops it.",
        cluster.addr,
        if with_kubelet {
            "running Pods as local processes"
        } else {
            "none (pass --image IMAGE=BINARY)"
        },
        args.kubeconfig.display(),
        args.kubeconfig.display()
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
