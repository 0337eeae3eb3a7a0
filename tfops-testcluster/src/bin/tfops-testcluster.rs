//! `tfops-testcluster up`: starts the test cluster (etcd, kube-apiserver,
//! kube-controller-manager and, with `--node`, the node agent), writes an admin kubeconfig,
//! and stops everything on Ctrl-C (or SIGTERM). `scripts/cluster up` builds the control plane
//! first and runs this. `tfops-testcluster forge`: the same for the test forge, a real Gitea
//! (`scripts/forge up`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use tfops_testcluster::node::NodeConfig;
use tfops_testcluster::{Options, TestCluster};

#[derive(Parser)]
#[command(about = "A real Kubernetes control plane on loopback, for contributors and demos")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the cluster and keep it running until Ctrl-C.
    Up {
        /// Where to write the admin kubeconfig.
        #[arg(long, default_value = "kubeconfig")]
        kubeconfig: PathBuf,
        /// Also run the node agent, which runs Pods as local processes.
        #[arg(long)]
        node: bool,
        /// An image the node agent runs, as NAME=BINARY (repeatable).
        #[arg(long = "image", value_name = "NAME=BINARY")]
        images: Vec<String>,
        /// Where the node agent keeps Pod directories (default: a temporary directory).
        #[arg(long)]
        pods_dir: Option<PathBuf>,
        /// Run every image not given by `--image` as a real container (podman and runc), from
        /// the images podman has.
        #[arg(long, requires = "node")]
        containers: bool,
    },
    /// Start a Gitea (from TFOPS_GITEA) with two users and a repository, until Ctrl-C.
    Forge {
        /// The repository to make, owned by the admin user.
        #[arg(long, default_value = "infra")]
        repository: String,
    },
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let (kubeconfig, node, images, pods_dir, containers) = match Cli::parse().command {
        Command::Up {
            kubeconfig,
            node,
            images,
            pods_dir,
            containers,
        } => (kubeconfig, node, images, pods_dir, containers),
        Command::Forge { repository } => return forge(&repository).await,
    };
    if containers && !tfops_testcluster::node::containers_available() {
        bail!("--containers: podman does not answer (install podman and runc)");
    }
    let mut map = BTreeMap::new();
    for image in &images {
        let Some((name, binary)) = image.split_once('=') else {
            bail!("--image {image}: expected NAME=BINARY");
        };
        let binary = std::fs::canonicalize(binary)
            .with_context(|| format!("--image {image}: no binary at {binary}"))?;
        map.insert(name.to_string(), binary);
    }
    let pods_tmp = tempfile::tempdir()?;
    let root = pods_dir.unwrap_or_else(|| pods_tmp.path().to_path_buf());
    let mut base_env = BTreeMap::new();
    if let Some(path) = std::env::var_os("PATH") {
        base_env.insert("PATH".to_string(), path.to_string_lossy().into_owned());
    }
    let options = Options {
        node: node.then_some(NodeConfig {
            name: None,
            images: map,
            root,
            base_env,
            containers,
        }),
        binaries: None,
    };
    let started = Instant::now();
    let cluster = TestCluster::start_with(options).await?;
    let ready = started.elapsed();
    std::fs::write(&kubeconfig, cluster.kubeconfig())
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    println!(
        "cluster ready in {:.1} s: {} (Kubernetes v{}, etcd {})",
        ready.as_secs_f64(),
        cluster.server,
        tfops_testcluster::KUBERNETES_VERSION,
        tfops_testcluster::ETCD_VERSION
    );
    println!("kubeconfig: {}", kubeconfig.display());
    println!("logs and audit log: {}", cluster.dir().display());
    if let Some(node) = cluster.node() {
        println!("node agent: Node {}", node.name());
    }
    println!("Ctrl-C stops it");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    println!("stopping");
    drop(cluster);
    let _ = std::fs::remove_file(&kubeconfig);
    Ok(())
}

/// SIGINT or SIGTERM.
async fn stopped() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// Runs a Gitea with `repository` until stopped, printing how to reach it.
async fn forge(repository: &str) -> anyhow::Result<()> {
    use tfops_testcluster::gitea::{GITEA_VERSION, Gitea};
    let started = Instant::now();
    let gitea = Gitea::start().await?;
    gitea.create_repo(repository).await?;
    println!(
        "Gitea {GITEA_VERSION} ready in {:.1} s: {} (API {})",
        started.elapsed().as_secs_f64(),
        gitea.url,
        gitea.api()
    );
    for user in [&gitea.admin, &gitea.reviewer] {
        println!(
            "user {}: password {}, token {}",
            user.login, user.password, user.token
        );
    }
    println!("repository: {}", gitea.clone_url(repository));
    println!("Ctrl-C stops it (its data goes with it)");
    stopped().await?;
    println!("stopping");
    Ok(())
}
