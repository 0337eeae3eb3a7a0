//! The runner process of a runner Pod:
//! `tfops-runner --grpc-port 30000 --tls-dir /run/tls --grpc-max-message-size 134217728`.
//!
//! Reads `POD_NAME` and `POD_NAMESPACE`; serves until SIGTERM or SIGINT, then cancels running
//! commands (Terraform gets SIGTERM and its grace period to release the state lock).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use tfops_runner::client::{DEFAULT_MAX_MESSAGE, ServerTls, serve};
use tfops_runner::server::{RunnerConfig, RunnerService, find_binary};

struct Args {
    port: u16,
    tls_dir: PathBuf,
    max_message: usize,
    workdir_root: PathBuf,
    binary: String,
    grace: Duration,
}

fn parse() -> anyhow::Result<Args> {
    let mut args = Args {
        port: 30000,
        tls_dir: PathBuf::from("/run/tfops/tls"),
        max_message: DEFAULT_MAX_MESSAGE,
        workdir_root: std::env::temp_dir(),
        binary: std::env::var("TFOPS_BINARY").unwrap_or_else(|_| "auto".into()),
        grace: Duration::from_secs(25),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--grpc-port" => args.port = value()?.parse().context("--grpc-port")?,
            "--tls-dir" => args.tls_dir = value()?.into(),
            "--grpc-max-message-size" => {
                args.max_message = value()?.parse().context("--grpc-max-message-size")?
            }
            "--workdir-root" => args.workdir_root = value()?.into(),
            "--binary" => args.binary = value()?,
            "--grace-period" => {
                args.grace = Duration::from_secs(value()?.parse().context("--grace-period")?)
            }
            "--help" | "-h" => {
                println!(
                    "tfops-runner --grpc-port 30000 --tls-dir DIR [--grpc-max-message-size BYTES] [--workdir-root DIR] [--binary auto|terraform|tofu] [--grace-period SECONDS]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown flag {other} (see --help)"),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse()?;
    let pod = std::env::var("POD_NAME").unwrap_or_default();
    let namespace = std::env::var("POD_NAMESPACE").unwrap_or_default();
    let read = |name: &str| {
        let p = args.tls_dir.join(name);
        std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    let tls = ServerTls {
        cert: read("tls.crt")?,
        key: read("tls.key")?,
        client_ca_bundle: read("ca.crt")?,
    };
    let (binary, program) = find_binary(&args.binary).with_context(|| {
        format!(
            "no {} binary found on PATH (binary: {})",
            if args.binary == "auto" {
                "tofu or terraform"
            } else {
                &args.binary
            },
            args.binary
        )
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
    });
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", args.port))
        .await
        .with_context(|| format!("binding port {}", args.port))?;
    eprintln!(
        "tfops-runner {pod} in {namespace}: serving on port {}",
        args.port
    );
    let stopping = service.clone();
    let shutdown = async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        eprintln!("tfops-runner: stopping; cancelling running commands");
        stopping.cancel_all();
    };
    serve(listener, service, &tls, args.max_message, shutdown)
        .await
        .context("serving")?;
    Ok(())
}
