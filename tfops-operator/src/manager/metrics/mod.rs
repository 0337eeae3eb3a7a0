//! The manager's Prometheus metrics (`prometheus-client`), fed by the controller after every
//! reconcile: reconciles by result and their duration, runs by result, steps by kind and
//! result, drift found, runner Pod start latency and lifetime; the gauges of each object as
//! last seen (`objects`: by `Ready` reason, awaiting approval, drift, not Ready, the runner
//! queue); runner Pods as the cluster has them (`runner_pods`); and by the Kubernetes
//! client's layer ([`super::api_client`]): API requests. Every metric is listed in
//! `docs/metrics.md`.

mod in_progress;
mod objects;
mod runner_pods;
mod runs;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tfops_core::api::ObjectKey;
use tfops_core::reconcile::{Outcome, RunReport, StepKind};
use tfops_kube::controller::{ReconcileError, ReconcileObserver};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    event: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    result: &'static str,
    reason: &'static str,
}

/// The metrics and their registry.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabel, Counter>,
    duration: Histogram,
    runs: Family<RunLabels, Counter>,
    steps: Family<StepLabels, Counter>,
    objects: Arc<objects::Objects>,
    runner_pods: Arc<runner_pods::RunnerPods>,
    in_progress: Arc<in_progress::InProgress>,
    drift: Counter,
    runner_start: Histogram,
    runner_lifetime: Histogram,
    requests: Family<RequestLabels, Counter>,
    webhooks: Family<WebhookLabels, Counter>,
    pulls: crate::pulls::PullMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The forge's metrics: requests to its API, pull requests' plans, webhook deliveries.
fn register_forge(
    registry: &mut Registry,
    pulls: &crate::pulls::PullMetrics,
    webhooks: &Family<WebhookLabels, Counter>,
) {
    registry.register(
        "forge_requests",
        "Requests to forges' APIs (pull requests, comments, statuses), by HTTP method and status code (0: no answer)",
        pulls.forge_requests.clone(),
    );
    registry.register(
        "pull_request_plans",
        "Plans of pull requests by result (planned, failed, cancelled, superseded)",
        pulls.plans.clone(),
    );
    registry.register(
        "webhook_deliveries",
        "Forge webhook deliveries, by event and result (accepted, duplicate, ignored, refused, invalid, standby)",
        webhooks.clone(),
    );
}

impl Metrics {
    /// Every metric registered under the `tfops` prefix.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(jiff::Timestamp::now))
    }

    /// [`Metrics::new`] with the durations of the gauges taken at `clock`'s time.
    fn with_clock(clock: objects::Clock) -> Self {
        let mut registry = Registry::with_prefix("tfops");
        let reconciles = Family::<ResultLabel, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.01, 2.0, 16));
        let runs = Family::<RunLabels, Counter>::default();
        let steps = Family::<StepLabels, Counter>::default();
        let in_progress = Arc::new(in_progress::InProgress::new(clock.clone()));
        let objects = Arc::new(objects::Objects::new(clock));
        let runner_pods = Arc::new(runner_pods::RunnerPods::default());
        let drift = Counter::default();
        let runner_start = Histogram::new(exponential_buckets(0.1, 2.0, 12));
        let runner_lifetime = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        let requests = Family::<RequestLabels, Counter>::default();
        let webhooks = Family::<WebhookLabels, Counter>::default();
        let pulls = crate::pulls::PullMetrics::default();
        register_forge(&mut registry, &pulls, &webhooks);
        registry.register("reconciles", "Reconciles by result", reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "How long a reconcile took",
            duration.clone(),
        );
        registry.register("runs", "Runs by result and Ready reason", runs.clone());
        registry.register(
            "steps",
            "Steps performed, by kind and result",
            steps.clone(),
        );
        registry.register_collector(Box::new(objects.clone()));
        registry.register_collector(Box::new(runner_pods.clone()));
        registry.register_collector(Box::new(in_progress.clone()));
        registry.register(
            "drift_detected",
            "Drift checks that found drift",
            drift.clone(),
        );
        registry.register(
            "runner_start_seconds",
            "From the step before to a Ready, connected runner Pod",
            runner_start.clone(),
        );
        registry.register(
            "runner_lifetime_seconds",
            "From a runner connected to its session's end",
            runner_lifetime.clone(),
        );
        registry.register(
            "kube_api_requests",
            "Requests to the Kubernetes API, by HTTP method and status code (0: no answer)",
            requests.clone(),
        );
        Self {
            registry,
            reconciles,
            duration,
            runs,
            steps,
            objects,
            runner_pods,
            in_progress,
            drift,
            runner_start,
            runner_lifetime,
            requests,
            webhooks,
            pulls,
        }
    }

    /// What the pull-request loop counts into.
    pub fn pull_metrics(&self) -> crate::pulls::PullMetrics {
        self.pulls.clone()
    }

    /// Counts a webhook delivery of `event` (the forge's event name, `-` when missing) with
    /// `result`.
    pub fn webhook_delivery(&self, event: &str, result: &'static str) {
        let event = if event.is_empty() { "-" } else { event };
        self.webhooks
            .get_or_create(&WebhookLabels {
                event: event.chars().take(64).collect(),
                result,
            })
            .inc();
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Counts one request to the Kubernetes API.
    pub fn api_request(&self, method: &str, code: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_string(),
                code: code.to_string(),
            })
            .inc();
    }

    fn record_steps(&self, report: &RunReport) {
        let mut previous = None;
        let mut runner_since = None;
        for r in &report.records {
            let result = if r.result.is_ok() {
                "success"
            } else {
                "failure"
            };
            self.steps
                .get_or_create(&StepLabels {
                    step: format!("{:?}", r.step),
                    result: result.into(),
                })
                .inc();
            if let Ok(Outcome::DriftChecked { drifted }) = &r.result
                && !drifted.is_empty()
            {
                self.drift.inc();
            }
            if r.step == StepKind::StartRunner
                && r.result.is_ok()
                && let Some(before) = previous
            {
                let took: jiff::SignedDuration = r.at.duration_since(before);
                self.runner_start.observe(took.as_secs_f64().max(0.0));
            }
            if r.step == StepKind::StartRunner && r.result.is_ok() {
                runner_since = Some(r.at);
            }
            if r.step == StepKind::Cleanup
                && let Some(since) = runner_since.take()
            {
                let lived: jiff::SignedDuration = r.at.duration_since(since);
                self.runner_lifetime.observe(lived.as_secs_f64().max(0.0));
            }
            previous = Some(r.at);
        }
    }

    /// Counts the run `report` records, by its result.
    fn record_run(&self, report: &RunReport) {
        if let Some((result, reason)) = runs::result(report) {
            self.runs.get_or_create(&RunLabels { result, reason }).inc();
        }
    }

    /// Watches the runner Pods of `namespaces` (empty: all) for `tfops_runner_pods`, until
    /// the future is dropped.
    pub async fn watch_runner_pods(&self, client: kube::Client, namespaces: &[String]) {
        self.runner_pods.watch(client, namespaces).await;
    }
}

impl ReconcileObserver for Metrics {
    fn reconciled(
        &self,
        object: &ObjectKey,
        took: Duration,
        outcome: Result<&RunReport, &ReconcileError>,
    ) {
        self.duration.observe(took.as_secs_f64());
        self.in_progress.ended(object);
        let result = if outcome.is_ok() { "success" } else { "error" };
        self.reconciles
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
        if let Ok(report) = outcome {
            self.record_steps(report);
            self.record_run(report);
            self.objects.observe(object, report);
        }
    }

    fn deleted(&self, object: &ObjectKey) {
        self.objects.forget(object);
        self.in_progress.ended(object);
    }

    fn started(&self, object: &ObjectKey) {
        self.in_progress.began(object);
    }
}
