//! Starts the loopback API server (a test double, see `tests::cluster`), writes an admin
//! kubeconfig, and serves until Ctrl-C, so that anyone can point kubectl at it.

use clap::Parser;

/// A Kubernetes API server test double on 127.0.0.1.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = "loopback.kubeconfig")]
    kubeconfig: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cluster = tests::cluster::LoopbackCluster::start().await?;
    std::fs::write(&args.kubeconfig, cluster.kubeconfig())?;
    println!(
        "loopback API server on https://{} (a test double: see the README for what it serves)\nkubeconfig: {}\ntry: kubectl --kubeconfig {} get secrets -A\nCtrl-C stops it.",
        cluster.addr,
        args.kubeconfig.display(),
        args.kubeconfig.display()
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
