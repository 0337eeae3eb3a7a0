//! The runner process: flags, TLS files, serving until SIGTERM. Shared by the `tfops-runner`
//! binary and `tfops runner` (local mode starts itself as the runner).

use std::path::PathBuf;
use std::time::Duration;

use crate::client::{DEFAULT_MAX_MESSAGE, ServerTls, serve};
use crate::server::{RunnerConfig, RunnerService, find_binary};

/// Why the runner process could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// A flag is unknown, lacks its value, or has a bad one.
    #[error("{0} (see --help)")]
    Usage(String),
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
        "no {0} binary found on PATH; install one (scripts/install-terraform) or set TFOPS_TERRAFORM"
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

/// The runner's flags.
#[derive(Debug, Clone)]
pub struct Args {
    /// `--grpc-port` (default 30000).
    pub port: u16,
    /// `--listen` address (default `TFOPS_LISTEN`, else `0.0.0.0`; local mode uses
    /// `127.0.0.1`).
    pub listen: String,
    /// `--tls-dir` with `tls.crt`, `tls.key`, `ca.crt`.
    pub tls_dir: PathBuf,
    /// `--grpc-max-message-size`.
    pub max_message: usize,
    /// `--workdir-root` (default the temp directory).
    pub workdir_root: PathBuf,
    /// `--binary auto|terraform|tofu` (default `TFOPS_BINARY` or `auto`).
    pub binary: String,
    /// `--grace-period` seconds for Terraform after SIGTERM.
    pub grace: Duration,
}

/// The usage line.
pub const USAGE: &str = "tfops-runner --grpc-port 30000 --tls-dir DIR [--listen ADDR] [--grpc-max-message-size BYTES] [--workdir-root DIR] [--binary auto|terraform|tofu] [--grace-period SECONDS]";

/// Parses flags (without the program name). `Ok(None)` for `--help`.
///
/// # Errors
/// [`ProcessError::Usage`].
pub fn parse_args(argv: &[String]) -> Result<Option<Args>, ProcessError> {
    let mut args = Args {
        port: 30000,
        // A Pod binds every address of its own network namespace; the loopback cluster's
        // kubelet, running Pods as plain processes, names each its own address instead.
        listen: std::env::var("TFOPS_LISTEN").unwrap_or_else(|_| "0.0.0.0".into()),
        tls_dir: PathBuf::from("/run/tfops/tls"),
        max_message: DEFAULT_MAX_MESSAGE,
        workdir_root: std::env::temp_dir(),
        binary: std::env::var("TFOPS_BINARY").unwrap_or_else(|_| "auto".into()),
        grace: Duration::from_secs(25),
    };
    let mut it = argv.iter();
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| ProcessError::Usage(format!("{flag} needs a value")))
        };
        let number = |v: String| -> Result<u64, ProcessError> {
            v.parse()
                .map_err(|_| ProcessError::Usage(format!("{flag} takes a number, not {v:?}")))
        };
        match flag.as_str() {
            "--grpc-port" => {
                args.port = u16::try_from(number(value()?)?)
                    .map_err(|_| ProcessError::Usage("--grpc-port is a port number".into()))?
            }
            "--listen" => args.listen = value()?,
            "--tls-dir" => args.tls_dir = value()?.into(),
            "--grpc-max-message-size" => {
                args.max_message = usize::try_from(number(value()?)?).unwrap_or(usize::MAX)
            }
            "--workdir-root" => args.workdir_root = value()?.into(),
            "--binary" => args.binary = value()?,
            "--grace-period" => args.grace = Duration::from_secs(number(value()?)?),
            "--help" | "-h" => return Ok(None),
            other => return Err(ProcessError::Usage(format!("unknown flag {other}"))),
        }
    }
    Ok(Some(args))
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
        binary,
        workdir_root: args.workdir_root.clone(),
        home,
        grace: args.grace,
        max_log_lines: 50_000,
        kubeconfig: std::env::var_os("TFOPS_KUBECONFIG").map(PathBuf::from),
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
    eprintln!(
        "tfops-runner {pod} in {namespace}: serving on {}:{}",
        args.listen,
        listener.local_addr().map(|a| a.port()).unwrap_or(args.port)
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
        eprintln!("tfops-runner: stopping; cancelling running commands");
        stopping.cancel_all();
    };
    let idle = service.clone();
    serve(listener, service, &tls, args.max_message, shutdown).await?;
    // Cancelled commands finish their SIGTERM handling (releasing state locks) before exit.
    idle.wait_idle(args.grace + Duration::from_secs(5)).await;
    Ok(())
}
