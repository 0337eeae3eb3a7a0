//! The manager process (`tfops-manager`): flags, logs, the metrics and health endpoints,
//! leader election, and the controller of [`crate::cluster`] while this replica leads.
//!
//! Stopping never kills a run: on SIGTERM, or when leadership is lost, the manager stops at
//! once without waiting for reconciles under way. Their commands go on in the runner Pods, each
//! apply recorded in its object's status before it started, so the next leader attaches to it
//! and records its result (it never applies twice).

pub mod api_client;
pub mod fence;
pub mod flags;
pub mod leader;
pub mod metrics;
pub mod serve;
pub mod webhook;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use tfops_kube::controller::Observer;
use tfops_kube::runner::pki::Validity;

use crate::cluster::ClusterOptions;
use flags::Flags;

/// The controller's options from the flags.
///
/// # Errors
/// Certificate lifetimes that would renew without end: a renewal window not shorter than
/// the certificates' validity, or certificates outliving their CA.
pub fn options(
    flags: &Flags,
    identity: &str,
    metrics: Arc<metrics::Metrics>,
) -> anyhow::Result<ClusterOptions> {
    let mut o = ClusterOptions::new(&flags.namespace, &flags.runner_pod_image);
    let ca = flags.ca_validity_duration;
    o.validity = Validity {
        ca,
        leaf: flags
            .cert_validity_duration
            .unwrap_or_else(|| (ca / 3).max(Duration::from_secs(3600)).min(ca)),
        look_ahead: flags.cert_renew_before.unwrap_or(ca / 4),
    };
    let v = &o.validity;
    if v.leaf > v.ca {
        anyhow::bail!(
            "--cert-validity-duration ({}) must not be longer than --ca-validity-duration ({})",
            tfops_core::duration::format(v.leaf),
            tfops_core::duration::format(v.ca)
        );
    }
    if v.look_ahead >= v.leaf {
        anyhow::bail!(
            "--cert-renew-before ({}) must be shorter than the certificates' validity ({})",
            tfops_core::duration::format(v.look_ahead),
            tfops_core::duration::format(v.leaf)
        );
    }
    o.controller.error_requeue = flags.error_requeue_interval;
    o.controller.source_poll_interval =
        Some(flags.source_poll_interval).filter(|every| !every.is_zero());
    o.runner_creation_timeout = flags.runner_creation_timeout;
    o.runner_max_message = flags.runner_grpc_max_message_size;
    if flags.default_timeout.is_zero() {
        anyhow::bail!("--default-timeout must be longer than zero");
    }
    o.default_timeout = flags.default_timeout;
    o.runner_deadline_margin = flags.runner_deadline_margin;
    o.cert_rotation_check = flags.cert_rotation_check_frequency;
    o.argocd_namespace = flags
        .enable_argocd_credentials
        .then(|| flags.argocd_namespace.clone());
    o.git_cache = flags.git_cache.clone();
    o.reporter = ("tfops".into(), identity.to_string());
    o.controller.namespaces = flags.watch_namespaces.clone();
    o.runner_grpc_port = flags.runner_grpc_port;
    o.controller.concurrency = flags.concurrent;
    o.controller.shard = flags.shard.clone();
    o.pull_requests = Some(tfops_kube::controller::PollNow::default());
    o.pull_metrics = metrics.pull_metrics();
    o.controller.observer = Some(Observer(metrics));
    Ok(o)
}

/// The webhook receiver on `--webhook-addr`, when given: where it listens, and what it asks
/// the source poller.
///
/// # Errors
/// A secret file that cannot be read or is empty; an address that cannot be bound.
async fn webhooks(
    flags: &Flags,
    metrics: &Arc<metrics::Metrics>,
    leading: &Arc<AtomicBool>,
    pulls: &tfops_kube::controller::PollNow,
) -> anyhow::Result<Option<(std::net::SocketAddr, tfops_kube::controller::PollNow)>> {
    let Some(addr) = flags.webhook_addr else {
        return Ok(None);
    };
    let Some(path) = &flags.webhook_secret_file else {
        anyhow::bail!(
            "--webhook-addr needs --webhook-secret-file (the secret that signs deliveries)"
        );
    };
    let secret = std::fs::read(path)
        .with_context(|| format!("reading --webhook-secret-file {}", path.display()))?;
    // A Secret mounted from `kubectl create secret --from-file` may end with a newline.
    let secret = secret.trim_ascii_end();
    if secret.is_empty() {
        anyhow::bail!("--webhook-secret-file {} is empty", path.display());
    }
    let poll_now = tfops_kube::controller::PollNow::default();
    let receiver =
        webhook::Receiver::new(secret, poll_now.clone(), metrics.clone(), leading.clone())
            .with_pull_requests(pulls.clone());
    let at = webhook::serve(addr, Arc::new(receiver))
        .await
        .with_context(|| format!("serving webhooks on {addr}"))?;
    Ok(Some((at, poll_now)))
}

/// The controller, and the watch of runner Pods its metrics count, until the controller ends.
async fn reconcile(
    client: kube::Client,
    options: ClusterOptions,
    runner: Option<Arc<dyn tfops_core::ports::RunnerPort>>,
    metrics: &metrics::Metrics,
) -> anyhow::Result<()> {
    let namespaces = options.controller.namespaces.clone();
    let pods = metrics.watch_runner_pods(client.clone(), &namespaces);
    let controller =
        crate::cluster::run_with_runner(client, options, std::future::pending(), runner);
    tokio::pin!(controller);
    tokio::select! {
        r = &mut controller => return Ok(r?),
        // The watch never ends by itself; were it to, the controller goes on without it.
        () = pods => tracing::warn!("the watch of runner Pods ended; tfops_runner_pods stops"),
    }
    Ok(controller.await?)
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
    run_with_runner(flags, None).await
}

/// The manager's Kubernetes client (rate-limited, counted, and fenced: [`fence`]) and its
/// fence, unlimited until this replica leads.
async fn client(
    flags: &Flags,
    metrics: &Arc<metrics::Metrics>,
) -> anyhow::Result<(kube::Client, fence::Fence)> {
    let config = kube::Config::infer()
        .await
        .context("finding the Kubernetes configuration (in-cluster, or KUBECONFIG)")?;
    let fence = fence::Fence::default();
    let layer =
        api_client::ApiLayer::new(flags.kube_api_qps, flags.kube_api_burst, metrics.clone())
            .fenced(fence.clone());
    let client = api_client::client(config, &layer).context("building the Kubernetes client")?;
    Ok((client, fence))
}

/// [`run`] with another [`RunnerPort`](tfops_core::ports::RunnerPort) than runner Pods, when
/// given (see [`crate::cluster::run_with_runner`]).
///
/// # Errors
/// As [`run`].
pub async fn run_with_runner(
    flags: Flags,
    runner: Option<Arc<dyn tfops_core::ports::RunnerPort>>,
) -> anyhow::Result<()> {
    let metrics = Arc::new(metrics::Metrics::new());
    let (client, fence) = client(&flags, &metrics).await?;
    let identity = flags.identity.clone().unwrap_or_else(|| {
        std::env::var("HOSTNAME")
            .unwrap_or_else(|_| format!("tfops-manager-{}", std::process::id()))
    });
    let mut options = options(&flags, &identity, metrics.clone())?;
    let ready = Arc::new(AtomicBool::new(false));
    let leading = Arc::new(AtomicBool::new(!flags.leader_election));
    let pulls = options.pull_requests.clone().unwrap_or_default();
    let webhooks = match webhooks(&flags, &metrics, &leading, &pulls).await? {
        Some((at, poll_now)) => {
            options.controller.poll_now = Some(poll_now);
            at.to_string()
        }
        None => "-".to_string(),
    };
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
    let shard = flags.shard.selector();
    tracing::info!(%identity, metrics = %metrics_at, health = %health_at, %webhooks, %shard, "tfops-manager starting");
    if !flags.leader_election {
        ready.store(true, Ordering::Relaxed);
        tokio::select! {
            r = reconcile(client, options, runner, &metrics) => r?,
            () = terminated() => tracing::info!("stopping: runs under way go on in their runner Pods"),
        }
        return Ok(());
    }
    let mut leadership = leader::Leadership::join(
        client.clone(),
        &flags.namespace,
        &flags.lease_name(),
        &identity,
        flags.leader_election_lease_duration,
        fence,
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
    leading.store(true, Ordering::Relaxed);
    tokio::select! {
        r = reconcile(client, options, runner, &metrics) => r?,
        () = leadership.lost() => {
            // Another replica may lead now: stop at once rather than race it.
            anyhow::bail!("lost the leader Lease; stopping so that only the new leader reconciles");
        }
        () = terminated() => tracing::info!("stopping: runs under way go on in their runner Pods"),
    }
    leadership.release().await;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> anyhow::Result<ClusterOptions> {
        let mut args = vec!["tfops-manager", "--runner-pod-image", "r:1"];
        args.extend_from_slice(extra);
        options(
            &Flags::try_parse_from(args).unwrap(),
            "me",
            Arc::new(metrics::Metrics::new()),
        )
    }

    #[test]
    fn certificate_lifetimes_follow_the_flags_and_refuse_endless_renewal() {
        let o = parse(&[]).unwrap();
        let day = Duration::from_secs(86_400);
        assert_eq!(
            (o.validity.ca, o.validity.leaf, o.validity.look_ahead),
            (90 * day, 30 * day, Duration::from_secs(90 * 86_400 / 4))
        );
        // Short lifetimes (as the rotation tests use): the leaf never outlives its CA.
        let o = parse(&["--ca-validity-duration", "30s"]).unwrap();
        assert_eq!(o.validity.leaf, Duration::from_secs(30));
        let o = parse(&[
            "--ca-validity-duration",
            "30s",
            "--cert-validity-duration",
            "20s",
            "--cert-renew-before",
            "15s",
            "--error-requeue-interval",
            "2s",
            // Given twice: the last one counts.
            "--error-requeue-interval",
            "3s",
        ])
        .unwrap();
        assert_eq!(
            (o.validity.leaf, o.validity.look_ahead),
            (Duration::from_secs(20), Duration::from_secs(15))
        );
        assert_eq!(o.controller.error_requeue, Duration::from_secs(3));
        assert_eq!(
            o.controller.source_poll_interval,
            Some(Duration::from_secs(60)),
            "sources are polled by default"
        );
        let o = parse(&["--source-poll-interval", "0"]).unwrap();
        assert_eq!(
            o.controller.source_poll_interval, None,
            "0 turns polling off"
        );
        let e = parse(&["--ca-validity-duration", "1h", "--cert-renew-before", "2h"]).unwrap_err();
        assert!(
            e.to_string()
                .contains("--cert-renew-before (2h) must be shorter"),
            "{e}"
        );
        let e = parse(&[
            "--ca-validity-duration",
            "1h",
            "--cert-validity-duration",
            "2h",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("must not be longer"), "{e}");
    }
}
