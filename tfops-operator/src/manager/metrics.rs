//! The manager's Prometheus metrics (`prometheus-client`), fed by the controller after every
//! reconcile: reconciles by result and their duration, steps by kind and result, objects by
//! `Ready` reason, plans awaiting approval, drift found, runner Pod start latency and
//! lifetime; and by the Kubernetes client's layer ([`super::api_client`]): API requests.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
struct ReasonLabel {
    reason: String,
}

/// What each object was last seen as: its `Ready` reason, and whether a plan awaits approval.
type Seen = BTreeMap<ObjectKey, (String, bool)>;

/// The metrics and their registry.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabel, Counter>,
    duration: Histogram,
    steps: Family<StepLabels, Counter>,
    objects: Family<ReasonLabel, Gauge>,
    awaiting: Gauge,
    drift: Counter,
    runner_start: Histogram,
    runner_lifetime: Histogram,
    requests: Family<RequestLabels, Counter>,
    seen: Mutex<Seen>,
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

impl Metrics {
    /// Every metric registered under the `tfops` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tfops");
        let reconciles = Family::<ResultLabel, Counter>::default();
        let duration = Histogram::new(exponential_buckets(0.01, 2.0, 16));
        let steps = Family::<StepLabels, Counter>::default();
        let objects = Family::<ReasonLabel, Gauge>::default();
        let awaiting = Gauge::default();
        let drift = Counter::default();
        let runner_start = Histogram::new(exponential_buckets(0.1, 2.0, 12));
        let runner_lifetime = Histogram::new(exponential_buckets(1.0, 2.0, 14));
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("reconciles", "Reconciles by result", reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "How long a reconcile took",
            duration.clone(),
        );
        registry.register(
            "steps",
            "Steps performed, by kind and result",
            steps.clone(),
        );
        registry.register("objects", "Objects by Ready reason", objects.clone());
        registry.register(
            "plans_awaiting_approval",
            "Objects whose plan waits for approval",
            awaiting.clone(),
        );
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
            steps,
            objects,
            awaiting,
            drift,
            runner_start,
            runner_lifetime,
            requests,
            seen: Mutex::new(BTreeMap::new()),
        }
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

    fn record_object(&self, object: &ObjectKey, report: &RunReport) {
        let ready = report.status.conditions.iter().find(|c| c.type_ == "Ready");
        let reason = ready.map(|c| c.reason.clone()).unwrap_or_default();
        let awaiting = !report.status.plan.pending.is_empty()
            && ready.is_some_and(|c| c.reason == "TerraformPlannedWithChanges");
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.insert(object.clone(), (reason, awaiting));
        let mut by_reason: BTreeMap<&str, i64> = BTreeMap::new();
        for (reason, _) in seen.values() {
            *by_reason.entry(reason.as_str()).or_default() += 1;
        }
        // Reasons no object has any more go to zero rather than keep an old count.
        self.objects.clear();
        for (reason, n) in by_reason {
            self.objects
                .get_or_create(&ReasonLabel {
                    reason: reason.to_string(),
                })
                .set(n);
        }
        self.awaiting
            .set(seen.values().filter(|(_, a)| *a).count() as i64);
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
        let result = if outcome.is_ok() { "success" } else { "error" };
        self.reconciles
            .get_or_create(&ResultLabel {
                result: result.into(),
            })
            .inc();
        if let Ok(report) = outcome {
            self.record_steps(report);
            self.record_object(object, report);
        }
    }

    fn deleted(&self, object: &ObjectKey) {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(object);
    }
}
