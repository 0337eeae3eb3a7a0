//! What each object was last seen as, and the gauges made of it at every scrape: objects by
//! `Ready` reason, plans awaiting approval and for how long, drift not corrected, objects not
//! Ready and for how long, and the objects waiting for a runner Pod that a ResourceQuota
//! refused (the runner queue). Durations are taken at the scrape, so they grow between
//! reconciles; an object's series go when it is deleted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet};
use prometheus_client::metrics::MetricType;
use tfops_core::api::ObjectKey;
use tfops_core::conditions::{self, ConditionStatus, ConditionType, Reason};
use tfops_core::reconcile::{Outcome, RunReport, StepKind};

/// One object as its last reconcile left it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct View {
    /// `Ready`'s status, when it has one.
    ready: Option<ConditionStatus>,
    /// `Ready`'s reason ("" without `Ready`).
    reason: String,
    /// When `Ready` last changed status (its `lastTransitionTime`).
    ready_since: Option<jiff::Timestamp>,
    /// Since when a plan waits for approval; `None` when none does.
    awaiting_since: Option<jiff::Timestamp>,
    /// Drift was found and is not corrected yet.
    drifted: bool,
    /// Since when it waits for a runner Pod a ResourceQuota refused; `None` when it does not.
    queued_since: Option<jiff::Timestamp>,
}

impl View {
    /// The object as `report` leaves it, `before` being how the previous reconcile left it.
    ///
    /// A wait's start is the step that began it when this process saw it begin (the plan that
    /// became pending, the runner Pod the quota refused), carried over while the wait lasts;
    /// after a restart, when no such step is in the report, it is `Ready`'s
    /// `lastTransitionTime`.
    pub(super) fn of(report: &RunReport, before: Option<&View>) -> Self {
        let status = &report.status;
        let ready = conditions::find(&status.conditions, ConditionType::Ready);
        let reason = ready.map(|c| c.reason.clone()).unwrap_or_default();
        let ready_since = ready.map(|c| c.last_transition_time);
        let is = |r: Reason| reason == r.as_str();
        let awaiting = !status.plan.pending.is_empty()
            && ready.is_some_and(|c| c.status == ConditionStatus::Unknown)
            && is(Reason::TerraformPlannedWithChanges);
        let planned = report.records.iter().rev().find_map(|r| match &r.result {
            Ok(Outcome::Planned {
                has_changes: true, ..
            }) => Some(r.at),
            _ => None,
        });
        let refused = report.records.iter().find_map(|r| match &r.result {
            Err(f) if f.reason == Reason::RunnerQuotaExhausted => Some(r.at),
            _ => None,
        });
        let queued = is(Reason::RunnerQuotaExhausted);
        Self {
            ready: ready.map(|c| c.status),
            awaiting_since: awaiting
                .then(|| {
                    before
                        .and_then(|b| b.awaiting_since)
                        .or(planned)
                        .or(ready_since)
                })
                .flatten(),
            drifted: is(Reason::DriftDetected)
                || (!status.plan.pending.is_empty() && status.plan.is_drift_detection_plan),
            queued_since: queued
                .then(|| {
                    before
                        .and_then(|b| b.queued_since)
                        .or(refused)
                        .or(ready_since)
                })
                .flatten(),
            ready_since,
            reason,
        }
    }
}

/// Whether `report` ends with the object gone (its finalizer removed): no reconcile follows.
pub(super) fn released(report: &RunReport) -> bool {
    report
        .records
        .iter()
        .any(|r| r.step == StepKind::RemoveFinalizer && r.result.is_ok())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabels {
    namespace: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectReasonLabels {
    namespace: String,
    name: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabel {
    namespace: String,
}

/// The time gauges are taken at.
pub(super) type Clock = Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>;

/// Every object this manager reconciled, as last seen; encoded at each scrape.
pub(super) struct Objects {
    seen: Mutex<BTreeMap<ObjectKey, View>>,
    clock: Clock,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects").finish_non_exhaustive()
    }
}

impl Objects {
    pub(super) fn new(clock: Clock) -> Self {
        Self {
            seen: Mutex::new(BTreeMap::new()),
            clock,
        }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, BTreeMap<ObjectKey, View>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `object` as `report` leaves it; gone when the report released it.
    pub(super) fn observe(&self, object: &ObjectKey, report: &RunReport) {
        let mut seen = self.seen();
        if released(report) {
            seen.remove(object);
            return;
        }
        let view = View::of(report, seen.get(object));
        seen.insert(object.clone(), view);
    }

    /// `object` no longer exists (or is no longer this manager's).
    pub(super) fn forget(&self, object: &ObjectKey) {
        self.seen().remove(object);
    }
}

fn seconds(now: jiff::Timestamp, since: jiff::Timestamp) -> f64 {
    now.duration_since(since).as_secs_f64().max(0.0)
}

fn labels(key: &ObjectKey) -> ObjectLabels {
    ObjectLabels {
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    }
}

/// One gauge family of `series`.
pub(super) fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, V)>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in series {
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// The counts: objects by reason, plans awaiting approval.
fn encode_counts(
    seen: &BTreeMap<ObjectKey, View>,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut by_reason: BTreeMap<ReasonLabel, i64> = BTreeMap::new();
    for view in seen.values() {
        *by_reason
            .entry(ReasonLabel {
                reason: view.reason.clone(),
            })
            .or_default() += 1;
    }
    gauges(encoder, "objects", "Objects by Ready reason.", by_reason)?;
    let awaiting = seen.values().filter(|v| v.awaiting_since.is_some()).count();
    encoder
        .encode_descriptor(
            "plans_awaiting_approval",
            "Objects whose plan waits for approval.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&(awaiting as i64))
}

/// The runner queue by namespace: how many wait, and the longest wait (0 when none).
fn encode_queue(
    seen: &BTreeMap<ObjectKey, View>,
    now: jiff::Timestamp,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut queue: BTreeMap<&str, (i64, f64)> = BTreeMap::new();
    for (key, view) in seen {
        let entry = queue.entry(key.namespace.as_str()).or_default();
        if let Some(since) = view.queued_since {
            entry.0 += 1;
            entry.1 = entry.1.max(seconds(now, since));
        }
    }
    let label = |ns: &str| NamespaceLabel {
        namespace: ns.to_string(),
    };
    gauges(
        encoder,
        "runner_queue_objects",
        "Objects waiting for a runner Pod that a ResourceQuota refused (Ready reason RunnerQuotaExhausted), by namespace.",
        queue.iter().map(|(ns, (n, _))| (label(ns), *n)),
    )?;
    gauges(
        encoder,
        "runner_queue_wait_seconds",
        "The longest wait of an object for a runner Pod that a ResourceQuota refused, by namespace (0: none waits).",
        queue.iter().map(|(ns, (_, wait))| (label(ns), *wait)),
    )
}

impl Objects {
    /// Every gauge at `now`.
    fn encode_at(
        &self,
        now: jiff::Timestamp,
        mut encoder: DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let seen = self.seen();
        encode_counts(&seen, &mut encoder)?;
        gauges(
            &mut encoder,
            "plan_awaiting_approval_seconds",
            "How long the object's plan has waited for approval (present only while one waits).",
            seen.iter().filter_map(|(k, v)| {
                v.awaiting_since
                    .map(|since| (labels(k), seconds(now, since)))
            }),
        )?;
        gauges(
            &mut encoder,
            "object_drifted",
            "1 when the object's last drift check found drift that is not corrected yet, else 0.",
            seen.iter().map(|(k, v)| (labels(k), i64::from(v.drifted))),
        )?;
        gauges(
            &mut encoder,
            "object_not_ready_seconds",
            "How long the object's Ready condition has not been True, with its reason (present only while not Ready).",
            seen.iter().filter_map(|(k, v)| {
                let since = v
                    .ready_since
                    .filter(|_| v.ready != Some(ConditionStatus::True))?;
                let labels = ObjectReasonLabels {
                    namespace: k.namespace.clone(),
                    name: k.name.clone(),
                    reason: v.reason.clone(),
                };
                Some((labels, seconds(now, since)))
            }),
        )?;
        encode_queue(&seen, now, &mut encoder)
    }
}

impl Collector for Objects {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_at((self.clock)(), encoder)
    }
}
