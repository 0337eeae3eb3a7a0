//! The manager process (`tfops-manager`): flags, logs, the metrics and health endpoints,
//! leader election, and the controller of [`crate::cluster`] while this replica leads.
//!
//! Stopping never kills a run: on SIGTERM, or when leadership is lost, the manager stops at
//! once without waiting for reconciles under way. Their commands go on in the runner Pods, each
//! apply recorded in its object's status before it started, so the next leader attaches to it
//! and records its result (it never applies twice).

pub mod api_client;
pub mod flags;
pub mod leader;
pub mod metrics;
pub mod serve;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use tfops_kube::controller::Observer;
use tfops_kube::runner::pki::Validity;

use crate::cluster::ClusterOptions;
use flags::Flags;

/// The controller's options from the flags.
pub fn options(flags: &Flags, identity: &str, metrics: Arc<metrics::Metrics>) -> ClusterOptions {
    let mut o = ClusterOptions::new(&flags.namespace, &flags.runner_pod_image);
    o.validity = Validity {
        ca: flags.ca_validity_duration,
        leaf: (flags.ca_validity_duration / 3).max(std::time::Duration::from_secs(3600)),
        look_ahead: flags.ca_validity_duration / 4,
    };
    o.runner_creation_timeout = flags.runner_creation_timeout;
    o.runner_max_message = flags.runner_grpc_max_message_size;
    o.cert_rotation_check = flags.cert_rotation_check_frequency;
    o.argocd_namespace = flags
        .enable_argocd_credentials
        .then(|| flags.argocd_namespace.clone());
    o.git_cache = flags.git_cache.clone();
    o.reporter = ("tfops".into(), identity.to_string());
    o.controller.namespaces = flags.watch_namespaces.clone();
    o.runner_grpc_port = flags.runner_grpc_port;
    o.controller.concurrency = flags.concurrent;
    o.controller.observer = Some(Observer(metrics));
    o
}

/// SIGTERM or SIGINT.
async fn terminated() {
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate());
    match term {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The manager's `main`: flags from the command line and environment, logs, [`run`].
///
/// # Errors
/// As [`run`]; bad flags end the process with clap's message.
pub async fn main() -> anyhow::Result<()> {
    use clap::Parser;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let flags = Flags::parse();
    crate::logs::init(flags.log_format, "info");
    run(flags).await
}

/// Runs the manager until SIGTERM (or lost leadership).
///
/// # Errors
/// No Kubernetes configuration, an endpoint that cannot be bound, the CA.
pub async fn run(flags: Flags) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("finding the Kubernetes configuration (in-cluster, or KUBECONFIG)")?;
    let metrics = Arc::new(metrics::Metrics::new());
    let layer =
        api_client::ApiLayer::new(flags.kube_api_qps, flags.kube_api_burst, metrics.clone());
    let client = api_client::client(config, &layer).context("building the Kubernetes client")?;
    let identity = flags.identity.clone().unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("tfops-manager-{}", std::process::id()))
    });
    let ready = Arc::new(AtomicBool::new(false));
    let endpoints = serve::Endpoints {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let metrics_at = serve::serve(flags.metrics_addr, endpoints.clone())
        .await
        .with_context(|| format!("serving metrics on {}", flags.metrics_addr))?;
    let health_at = if flags.health_addr == flags.metrics_addr {
        metrics_at
    } else {
        serve::serve(flags.health_addr, endpoints)
            .await
            .with_context(|| format!("serving health on {}", flags.health_addr))?
    };
    tracing::info!(%identity, metrics = %metrics_at, health = %health_at, "tfops-manager starting");
    let options = options(&flags, &identity, metrics);
    if !flags.leader_election {
        ready.store(true, Ordering::Relaxed);
        tokio::select! {
            r = crate::cluster::run(client, options, std::future::pending()) => r?,
            () = terminated() => tracing::info!("stopping: runs under way go on in their runner Pods"),
        }
        return Ok(());
    }
    let mut leadership = leader::Leadership::join(
        client.clone(),
        &flags.namespace,
        &flags.leader_election_id,
        &identity,
        flags.leader_election_lease_duration,
    )
    .await?;
    ready.store(true, Ordering::Relaxed);
    tokio::select! {
        () = leadership.acquired() => {}
        () = terminated() => {
            leadership.release().await;
            return Ok(());
        }
    }
    tracing::info!(%identity, "leading");
    tokio::select! {
        r = crate::cluster::run(client, options, std::future::pending()) => r?,
        () = leadership.lost() => {
            // Another replica may lead now: stop at once rather than race it.
            anyhow::bail!("lost the leader Lease; stopping so that only the new leader reconciles");
        }
        () = terminated() => tracing::info!("stopping: runs under way go on in their runner Pods"),
    }
    leadership.release().await;
    Ok(())
}
