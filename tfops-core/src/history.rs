//! Run history: what each run of an object did, kept for the last runs (`tfops history`,
//! `tfops logs`, the Argo CD tab). An entry is made from the object as the run found it and
//! the driver's [`RunReport`]; where entries are kept is the composition root's choice (a
//! ConfigMap next to the object in a cluster).
//!
//! Entries hold no inputs: the tail of Terraform's output is what Terraform printed, with
//! sensitive values already redacted by Terraform itself.

use serde::{Deserialize, Serialize};

use crate::api::{TerraformObject, annotations};
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};
use crate::reconcile::{Outcome, Record, RunReport, StepFailure, StepKind};

/// How many runs are kept per object.
pub const MAX_RUNS: usize = 10;
use crate::tail::append_tail;

/// Change counts of a plan, as `+add ~change -destroy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Resources to add.
    pub add: u32,
    /// Resources to change.
    pub change: u32,
    /// Resources to destroy.
    pub destroy: u32,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "+{} ~{} -{}", self.add, self.change, self.destroy)
    }
}

/// One run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEntry {
    /// When it started.
    pub started_at: jiff::Timestamp,
    /// When it ended.
    pub finished_at: jiff::Timestamp,
    /// What started it: `created`, `spec changed (generation N)`, `approval`,
    /// `replan requested`, `reconcile requested`, `deletion`, `resumed run`, `retry`, `interval`,
    /// `new revision` (the source poller saw one before the interval).
    pub trigger: String,
    /// The source revision it ran (`main@sha1:…`), when resolved.
    #[serde(default)]
    pub revision: String,
    /// The plan it made or applied, when any.
    #[serde(default)]
    pub plan_id: String,
    /// The plan's change counts, when it planned changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// Whether it applied (or destroyed) anything.
    #[serde(default)]
    pub applied: bool,
    /// What drifted, when it checked for drift and found some.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drifted: Vec<String>,
    /// The steps performed, in order (a failed one marked `!`).
    #[serde(default)]
    pub steps: Vec<String>,
    /// `Succeeded`, `Failed`, `AwaitingApproval` or `Waiting` (from `Ready`).
    pub result: String,
    /// `Ready`'s reason at the end.
    pub reason: String,
    /// `Ready`'s message at the end.
    #[serde(default)]
    pub message: String,
    /// The last lines Terraform wrote (at most [`crate::tail::MAX_TAIL`] bytes).
    #[serde(default)]
    pub output_tail: String,
    /// The binary and version that ran (`tofu 1.12.6`, `terraform 1.15.5`), once known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binary: String,
    /// Who planned (or checked drift) in this run: the runner's identity.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub planned_by: String,
    /// Who applied in this run, when it applied: the apply runner's identity with
    /// `spec.runner.apply`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub applied_by: String,
    /// The state lock this run released, and why (`lock <id> of <holder>: a runner of this
    /// object that is gone`, or `... : asked`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub unlocked: String,
}

impl RunEntry {
    /// How long it took.
    pub fn duration(&self) -> std::time::Duration {
        let secs = (self.finished_at.as_millisecond() - self.started_at.as_millisecond()).max(0);
        std::time::Duration::from_millis(u64::try_from(secs).unwrap_or(0))
    }
}

/// The steps that make a reconcile a run worth recording (adding the finalizer alone, a pass
/// that found nothing due, or a suspended object's release of its runners is not).
fn is_run(kind: StepKind) -> bool {
    !matches!(
        kind,
        StepKind::AddFinalizer
            | StepKind::RemoveFinalizer
            | StepKind::ReleaseRunners
            | StepKind::Done
    )
}

/// What started a run, from the object as the run found it.
pub fn trigger(before: &TerraformObject) -> String {
    let status = &before.status;
    let newer = |annotation: &str, handled: &str| {
        before
            .annotation(annotation)
            .is_some_and(|v| !v.is_empty() && v != handled)
    };
    if before.metadata.deletion_timestamp.is_some() {
        "deletion".into()
    } else if status.conditions.is_empty() && status.observed_generation == 0 {
        "created".into()
    } else if status.observed_generation != before.metadata.generation {
        format!("spec changed (generation {})", before.metadata.generation)
    } else if newer(annotations::APPROVE, &status.plan.seen_approval)
        || (!matches!(before.spec.approve_plan.as_str(), "" | "auto")
            && before.spec.approve_plan != status.plan.seen_approve_plan)
    {
        "approval".into()
    } else if newer(
        annotations::REPLAN,
        status.last_handled_replan_at.as_deref().unwrap_or(""),
    ) {
        "replan requested".into()
    } else if newer(
        annotations::RECONCILE,
        status.last_handled_reconcile_at.as_deref().unwrap_or(""),
    ) {
        "reconcile requested".into()
    } else if status.active_run.is_some() {
        "resumed run".into()
    } else if crate::reconcile::queue::waiting_since(status).is_some() {
        "its turn for a runner Pod".into()
    } else if status.reconciliation_failures > 0 {
        "retry".into()
    } else {
        "interval".into()
    }
}

/// Whether a reconcile only looked at a new revision the source poller saw, which changed
/// nothing of the object's: it resolved and compared, nothing failed, and it neither waits
/// (for dependencies, or in the runner queue) nor started anything. Such a look is no run: not
/// in the history, not counted among runs.
pub fn looked_only(report: &RunReport) -> bool {
    let steps_looked = report.records.iter().all(|r| {
        matches!(r.step, StepKind::ResolveSource | StepKind::CompareSource) && r.result.is_ok()
    });
    // A look leaves `Ready` as it found it, and a look starts only without failures: the
    // `Ready=False` it may find is reported drift. Any other, or a dependency or the queue
    // to wait for, is a run's.
    let waits =
        conditions::find(&report.status.conditions, ConditionType::Ready).is_some_and(|c| {
            c.reason == Reason::DependencyNotReady.as_str()
                || (c.status == ConditionStatus::False
                    && c.reason != Reason::DriftDetected.as_str())
        }) || crate::reconcile::queue::waiting_since(&report.status).is_some();
    !report.records.is_empty() && steps_looked && !waits
}

/// Whether `spec.interval` had elapsed since the last run when a run began at `at`.
fn interval_elapsed(before: &TerraformObject, at: jiff::Timestamp) -> bool {
    let (Some(last), Ok(valid)) = (before.status.last_run_at, crate::api::validate(before)) else {
        return true;
    };
    crate::duration::elapsed(last, at) >= valid.interval
}

/// The entry for a reconcile of `before` that began at `started_at`, or `None` when it ran
/// nothing worth recording.
pub fn entry(
    before: &TerraformObject,
    report: &RunReport,
    started_at: jiff::Timestamp,
) -> Option<RunEntry> {
    if !report.records.iter().any(|r| is_run(r.step)) {
        return None;
    }
    // A look at a new revision that changed nothing of the object's ran nothing either (and
    // a commit to a monorepo would otherwise add an entry to every object's history).
    if looked_only(report) && report.status.last_run_at == before.status.last_run_at {
        return None;
    }
    // An attempt that found no room for its runner Pod ran nothing: the queue is in `Ready`,
    // and the history keeps the runs.
    let started = report
        .records
        .iter()
        .any(|r| r.step == StepKind::StartRunner && r.result.is_ok());
    if !started && crate::reconcile::queue::waiting_since(&report.status).is_some() {
        return None;
    }
    let status = &report.status;
    let mut entry = blank(before, report, started_at);
    let new_revision =
        report.status.last_attempted_revision != before.status.last_attempted_revision;
    if entry.trigger == "interval" && new_revision && !interval_elapsed(before, started_at) {
        // Only a revision the source poller saw starts a run before its interval.
        entry.trigger = "new revision".into();
    }
    let mut planned = false;
    let mut last_lock = None;
    for r in report.records.iter().filter(|r| is_run(r.step)) {
        match &r.result {
            Err(f) if f.lock.is_some() => last_lock = Some(f),
            Ok(Outcome::Unlocked) => entry.unlocked = unlocked(last_lock),
            _ => {}
        }
        planned |= note(&mut entry, r);
    }
    if !planned {
        entry.planned_by.clear();
    }
    if entry.applied {
        entry.applied_by = status.last_applied_by.clone().unwrap_or_default();
    }
    entry.plan_id = if entry.applied {
        status.plan.last_applied.clone()
    } else {
        status.plan.pending.clone()
    };
    append_tail(&mut entry.output_tail, &report.output_tail);
    Some(entry)
}

/// The entry before its steps are read: times, trigger, revision and the result `Ready` says.
fn blank(before: &TerraformObject, report: &RunReport, started_at: jiff::Timestamp) -> RunEntry {
    let status = &report.status;
    let ready = conditions::find(&status.conditions, ConditionType::Ready);
    RunEntry {
        started_at,
        finished_at: report.records.last().map_or(started_at, |r| r.at),
        trigger: trigger(before),
        revision: status.last_attempted_revision.clone().unwrap_or_default(),
        plan_id: String::new(),
        summary: None,
        applied: false,
        drifted: Vec::new(),
        steps: Vec::new(),
        result: match ready.map(|c| c.status) {
            Some(ConditionStatus::True) => "Succeeded",
            Some(ConditionStatus::False) => "Failed",
            _ if !status.plan.pending.is_empty() => "AwaitingApproval",
            _ => "Waiting",
        }
        .into(),
        reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        output_tail: String::new(),
        binary: String::new(),
        planned_by: String::new(),
        applied_by: String::new(),
        unlocked: String::new(),
    }
}

/// What a lock release released: the lock that stopped the step before it, and why.
fn unlocked(last_lock: Option<&StepFailure>) -> String {
    match last_lock.and_then(|f| f.lock.as_ref().map(|l| (f, l))) {
        Some((f, (id, holder))) => {
            let why = if f.lock_holder_gone {
                "a runner of this object that is gone"
            } else {
                "asked (forceUnlock)"
            };
            format!("lock {id} of {holder}: {why}")
        }
        None => "the lock whose release was asked for".into(),
    }
}

/// Notes what step `r` tells (who planned, the binary, the plan's summary, drift, an apply,
/// the step's name); whether it planned.
fn note(entry: &mut RunEntry, r: &Record) -> bool {
    let mut planned = false;
    match (&r.result, r.step) {
        (
            Ok(Outcome::RunnerStarted {
                identity, binary, ..
            }),
            StepKind::StartRunner,
        ) => {
            entry.planned_by.clone_from(identity);
            if !binary.is_empty() {
                entry.binary.clone_from(binary);
            }
        }
        (Ok(Outcome::SetUp { binary, .. }), _) if !binary.is_empty() => {
            entry.binary.clone_from(binary);
        }
        (Ok(_), StepKind::Plan | StepKind::DetectDrift) => planned = true,
        _ => {}
    }
    match &r.result {
        Ok(Outcome::Planned {
            has_changes: true,
            summary,
            ..
        }) => {
            entry.summary = Some(Summary {
                add: summary.add,
                change: summary.change,
                destroy: summary.destroy,
            });
        }
        Ok(Outcome::DriftChecked { drifted }) => entry.drifted.clone_from(drifted),
        Ok(Outcome::Applied | Outcome::Attached { .. }) => entry.applied = true,
        _ => {}
    }
    let name = format!("{:?}", r.step);
    entry.steps.push(if r.result.is_ok() {
        name
    } else {
        format!("{name}!")
    });
    planned
}

/// Puts `entry` first in `runs` (newest first) and keeps the last [`MAX_RUNS`].
pub fn record(runs: &mut Vec<RunEntry>, entry: RunEntry) {
    runs.insert(0, entry);
    runs.truncate(MAX_RUNS);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn object(status: serde_json::Value, annotations: serde_json::Value) -> TerraformObject {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "n", "generation": 2, "annotations": annotations},
            "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://g/x"}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn the_trigger_names_what_asked_for_the_run() {
        let ready = serde_json::json!([{"type": "Ready", "status": "True", "reason": "TerraformAppliedSucceed", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2}]);
        let seen = serde_json::json!({"observedGeneration": 2, "conditions": ready, "lastHandledReconcileAt": "r1", "lastHandledReplanAt": "p1"});
        assert_eq!(
            trigger(&object(serde_json::json!({}), serde_json::json!({}))),
            "created"
        );
        let mut older = seen.clone();
        older["observedGeneration"] = 1.into();
        assert_eq!(
            trigger(&object(older, serde_json::json!({}))),
            "spec changed (generation 2)"
        );
        let asked = |a: serde_json::Value| trigger(&object(seen.clone(), a));
        assert_eq!(
            asked(serde_json::json!({"infra.argocd.io/reconcile": "r1"})),
            "interval"
        );
        assert_eq!(
            asked(serde_json::json!({"infra.argocd.io/reconcile": "r2"})),
            "reconcile requested"
        );
        assert_eq!(
            asked(
                serde_json::json!({"infra.argocd.io/reconcile": "r2", "infra.argocd.io/replan": "p2"})
            ),
            "replan requested"
        );
        assert_eq!(
            asked(
                serde_json::json!({"infra.argocd.io/reconcile": "r2", "infra.argocd.io/approve": "plan-main-1@t"})
            ),
            "approval"
        );
        let mut failing = seen.clone();
        failing["reconciliationFailures"] = 2.into();
        assert_eq!(trigger(&object(failing, serde_json::json!({}))), "retry");
    }

    #[test]
    fn a_released_lock_is_recorded_with_why() {
        use crate::reconcile::{Record, RunReport, StepFailure};
        let at = jiff::Timestamp::UNIX_EPOCH;
        let locked = |gone: bool| Record {
            step: StepKind::Plan,
            at,
            result: Err(StepFailure {
                reason: crate::conditions::Reason::LockHeld,
                message: "plan: state locked".into(),
                lock: Some(("l-1".into(), "65532@app-tf-runner-0a1b2c3d4e".into())),
                lock_holder_gone: gone,
            }),
        };
        let unlocked = Record {
            step: StepKind::ForceUnlock,
            at,
            result: Ok(Outcome::Unlocked),
        };
        let report = |gone| RunReport {
            records: vec![locked(gone), unlocked.clone()],
            requeue_after: None,
            status: Default::default(),
            output_tail: String::new(),
        };
        let before = object(serde_json::json!({}), serde_json::json!({}));
        let e = entry(&before, &report(true), at).unwrap();
        assert_eq!(
            e.unlocked,
            "lock l-1 of 65532@app-tf-runner-0a1b2c3d4e: a runner of this object that is gone"
        );
        assert_eq!(e.steps, ["Plan!", "ForceUnlock"]);
        let e = entry(&before, &report(false), at).unwrap();
        assert!(
            e.unlocked.ends_with(": asked (forceUnlock)"),
            "{}",
            e.unlocked
        );
    }

    #[test]
    fn ten_runs_are_kept_newest_first() {
        let at = jiff::Timestamp::UNIX_EPOCH;
        let mut runs = Vec::new();
        for i in 0..12 {
            record(
                &mut runs,
                RunEntry {
                    started_at: at,
                    finished_at: at,
                    trigger: format!("run {i}"),
                    revision: String::new(),
                    plan_id: String::new(),
                    summary: None,
                    applied: false,
                    drifted: vec![],
                    steps: vec![],
                    result: "Succeeded".into(),
                    reason: String::new(),
                    message: String::new(),
                    output_tail: String::new(),
                    binary: String::new(),
                    planned_by: String::new(),
                    applied_by: String::new(),
                    unlocked: String::new(),
                },
            );
        }
        assert_eq!(runs.len(), MAX_RUNS);
        assert_eq!(runs[0].trigger, "run 11");
        assert_eq!(runs[9].trigger, "run 2");
    }

    #[test]
    fn a_look_is_no_run_unless_it_waits_or_ended_in_a_failure() {
        let report = |reason: &str, status: &str| RunReport {
            records: vec![Record {
                step: StepKind::ResolveSource,
                at: jiff::Timestamp::UNIX_EPOCH,
                result: Ok(Outcome::Fetched {
                    sha256: String::new(),
                }),
            }],
            requeue_after: None,
            status: serde_json::from_value(serde_json::json!({"conditions": [{
                "type": "Ready", "status": status, "reason": reason,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
            .unwrap(),
            output_tail: String::new(),
        };
        assert!(looked_only(&report("TerraformAppliedSucceed", "True")));
        assert!(
            looked_only(&report("DriftDetected", "False")),
            "reported drift stays"
        );
        assert!(!looked_only(&report("DependencyNotReady", "Unknown")));
        assert!(!looked_only(&report("SourceFetchFailed", "False")));
    }
}
