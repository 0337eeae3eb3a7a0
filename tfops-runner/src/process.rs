//! The runner process: flags, TLS files, serving until SIGTERM. Shared by the `tfops-runner`
//! binary and `tfops runner` (local mode starts itself as the runner).

use std::path::PathBuf;
use std::time::Duration;

use crate::client::{DEFAULT_MAX_MESSAGE, ServerTls, serve};
use crate::server::{RunnerConfig, RunnerService, find_binary};

/// Why the runner process could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// A TLS file could not be read.
    #[error("reading {path}")]
    Tls {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// No terraform/tofu binary.
    #[error(
        "no {0} binary found on PATH; install one (scripts/install-terraform, scripts/install-tofu) or set TFOPS_TERRAFORM or TFOPS_TOFU to its path"
    )]
    NoBinary(String),
    /// The port could not be bound.
    #[error("binding port {port}")]
    Bind {
        /// The port.
        port: u16,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("serving gRPC")]
    Serve(#[from] tonic::transport::Error),
}

fn seconds(text: &str) -> Result<Duration, String> {
    text.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("a number of seconds, not {text:?}"))
}

/// The runner's flags (`tfops-runner --help`).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "tfops-runner",
    version,
    about = "The tfops runner: runs Terraform or OpenTofu for the tfops controller, over gRPC with mutual TLS"
)]
pub struct Args {
    /// The gRPC port the controller connects to.
    #[arg(long = "grpc-port", default_value_t = 30000)]
    pub port: u16,
    /// The address to listen on (in a runner Pod: every address of the Pod's own network).
    #[arg(long, env = "TFOPS_LISTEN", default_value = "0.0.0.0")]
    pub listen: String,
    /// The directory with `tls.crt`, `tls.key` and `ca.crt` (the controller's CA bundle).
    #[arg(long, default_value = "/run/tfops/tls")]
    pub tls_dir: PathBuf,
    /// The largest gRPC message, in bytes (plan files travel in one).
    #[arg(long = "grpc-max-message-size", default_value_t = DEFAULT_MAX_MESSAGE)]
    pub max_message: usize,
    /// Where working directories are made (default: the temp directory).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub workdir_root: PathBuf,
    /// Which binary runs the configuration: `auto` prefers `tofu`, then `terraform`.
    #[arg(long, env = "TFOPS_BINARY", default_value = "auto")]
    pub binary: String,
    /// Seconds Terraform is given to stop (and release its state lock) after its interrupt.
    #[arg(long = "grace-period", default_value = "25", value_parser = seconds)]
    pub grace: Duration,
}

/// Parses flags (without the program name).
///
/// # Errors
/// clap's error: usage, an unknown flag (with a suggestion), a bad value, or `--help` /
/// `--version` (print it with [`clap::Error::exit`]).
pub fn parse_args(argv: &[String]) -> Result<Args, clap::Error> {
    use clap::Parser;
    Args::try_parse_from(std::iter::once("tfops-runner".to_string()).chain(argv.iter().cloned()))
}

/// Serves until SIGTERM or SIGINT, then cancels running commands and returns.
///
/// # Errors
/// A [`ProcessError`] naming what failed.
pub async fn run(args: Args) -> Result<(), ProcessError> {
    run_with(args, None).await
}

/// [`run`], writing plans and outputs with `stores` when given (a runner Pod's).
///
/// # Errors
/// A [`ProcessError`] naming what failed.
pub async fn run_with(
    args: Args,
    stores: Option<std::sync::Arc<dyn crate::stores::Stores>>,
) -> Result<(), ProcessError> {
    let read = |name: &str| {
        let path = args.tls_dir.join(name);
        std::fs::read_to_string(&path).map_err(|source| ProcessError::Tls { path, source })
    };
    let tls = ServerTls {
        cert: read("tls.crt")?,
        key: read("tls.key")?,
        client_ca_bundle: read("ca.crt")?,
    };
    let (binary, program) = find_binary(&args.binary).ok_or_else(|| {
        ProcessError::NoBinary(if args.binary == "auto" {
            "tofu or terraform".into()
        } else {
            args.binary.clone()
        })
    })?;
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| args.workdir_root.clone());
    let service = RunnerService::new(RunnerConfig {
        program,
        binary: binary.clone(),
        workdir_root: args.workdir_root.clone(),
        home,
        grace: args.grace,
        max_log_lines: 50_000,
        kubeconfig: std::env::var_os("TFOPS_KUBECONFIG").map(PathBuf::from),
        pod_name: crate::server::own_host(),
        others: crate::server::Overrides::from_env(),
    });
    let service = match stores {
        Some(stores) => service.with_stores(stores),
        None => service,
    };
    service.prefetch_version();
    let listener = tokio::net::TcpListener::bind((args.listen.as_str(), args.port))
        .await
        .map_err(|source| ProcessError::Bind {
            port: args.port,
            source,
        })?;
    let pod = std::env::var("POD_NAME").unwrap_or_default();
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_default();
    tracing::info!(
        pod = %pod,
        namespace = %namespace,
        listen = %args.listen,
        port = listener.local_addr().map(|a| a.port()).unwrap_or(args.port),
        binary = %binary,
        "serving"
    );
    let stopping = service.clone();
    let shutdown = async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("stopping: cancelling running commands");
        stopping.cancel_all();
    };
    let idle = service.clone();
    serve(listener, service, &tls, args.max_message, shutdown).await?;
    // Cancelled commands finish their interrupt handling (releasing state locks) before exit.
    idle.wait_idle(args.grace + Duration::from_secs(5)).await;
    Ok(())
}
