//! Approval: a plan is applied only when `approvePlan: auto`, `spec.force`, or a human
//! approved exactly this plan after seeing it pending (see [`crate::api::annotations`];
//! [`super::plan::record_pending`] records what a human has seen).
//!
//! > Without approval the run stops here; Argo CD shows Suspended. With approvePlan: auto,
//! > spec.force, or a matching plan ID the controller re-plans once more (to make sure the
//! > approved plan is still current) and applies.
//!
//! From the moment a run takes up an approval until its apply ends, `Ready` says the plan is
//! being applied (reason `TerraformApplying`), not that it awaits approval.

use super::plan::Planned;
use super::run::{End, Run, Stop};
use crate::api::{ApprovePlan, ValidSpec, annotations};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::ports::PullApproval;

/// How a plan that may be applied was approved.
pub(super) struct Given {
    /// In words, for the status while it is applied.
    pub(super) how: String,
    /// The approval given on a pull request that approved it ([`PullApproval::key`]): used
    /// once the apply starts, never again.
    pub(super) pull: Option<String>,
}

/// The most approvals given on pull requests kept as used or seen: far more than are ever
/// recorded for one object at once (each merged pull request's record goes once reported).
const KEPT_PULL_APPROVALS: usize = 64;

/// Goes on only when the plan may be applied, giving how it was approved (for the status
/// while it is applied); otherwise ends the run waiting for a human.
pub(super) fn approval(
    run: &mut Run<'_>,
    valid: &ValidSpec,
    plan_id: &str,
    planned: &Planned<'_>,
) -> Result<Given, Stop> {
    // Every approval recorded on a pull request has been looked at by this run: one that
    // arrives later starts a run of its own ([`pull_approved_pending`]).
    let seen: Vec<String> = run.s.pull_approvals.iter().map(PullApproval::key).collect();
    for key in seen {
        remember(&mut run.st.plan.seen_pull_approvals, key);
    }
    let (status, message) = match judge(run, valid, plan_id, planned) {
        Approval::Approved(how) => return Ok(Given { how, pull: None }),
        Approval::Pull(approval) => {
            return Ok(Given {
                how: format!("approved in {}", approval.by()),
                pull: Some(approval.key()),
            });
        }
        // Planning is all that was asked: done, not waiting.
        Approval::PlanOnly => (
            ConditionStatus::True,
            format!("{}; planOnly: never applied", planned.label),
        ),
        Approval::Waiting(message) => (ConditionStatus::Unknown, message),
    };
    run.set(
        ConditionType::Ready,
        status,
        Reason::TerraformPlannedWithChanges,
        message,
    );
    Err(Stop::End(End::Success))
}

/// At the start of a run: when a human approved the pending plan since it became pending,
/// `Ready` says so at once (the run makes the plan again and applies it if it still does
/// the same), instead of "awaits approval" while that plan is made.
pub(super) fn taken_up(run: &mut Run<'_>, valid: &ValidSpec) {
    let start = run.start();
    let pending = start.plan.pending.as_str();
    // Not when no apply could start anyway: the run ends waiting for the window (Ready says
    // so), and saying "applying" first would flip Argo CD's health at every run.
    if pending.is_empty()
        || start.plan.pending_digest.is_empty()
        || run.s.object.spec.plan_only
        || !super::window::open_now(run)
    {
        return;
    }
    if let Some(how) = given(run, valid, pending) {
        run.set(
            ConditionType::Ready,
            ConditionStatus::Unknown,
            Reason::TerraformApplying,
            format!(
                "plan {pending} was {how}: making it again to check it still does the same, then applying it"
            ),
        );
    }
}

/// `Ready` and `Reconciling` while `planned`, which may be applied (`how`: by whom), is
/// applied: no longer awaiting approval.
pub(super) fn applying(run: &mut Run<'_>, planned: &Planned<'_>, how: &str) {
    run.set(
        ConditionType::Ready,
        ConditionStatus::Unknown,
        Reason::TerraformApplying,
        format!("applying {}, {how}", planned.label),
    );
    run.set(
        ConditionType::Reconciling,
        ConditionStatus::True,
        Reason::TerraformApplying,
        format!("applying {}", planned.label),
    );
}

/// Adds `key` to a bounded list of approval keys (oldest dropped first).
fn remember(list: &mut Vec<String>, key: String) {
    if !list.contains(&key) {
        list.push(key);
    }
    let over = list.len().saturating_sub(KEPT_PULL_APPROVALS);
    list.drain(..over);
}

/// Records the approval given on a pull request `key` as used: the status written before the
/// apply starts holds it, so that content is never applied with it again.
pub(super) fn use_pull_approval(run: &mut Run<'_>, key: &str) {
    remember(&mut run.st.plan.used_pull_approvals, key.to_string());
}

/// The approvals recorded on the object's merged pull requests that were not used yet.
fn unused<'a>(run: &Run<'a>) -> Vec<&'a PullApproval> {
    let used = &run.start().plan.used_pull_approvals;
    run.s
        .pull_approvals
        .iter()
        .filter(|a| !a.reviewers.is_empty() && !a.digest.is_empty())
        .filter(|a| !used.contains(&a.key()))
        .collect()
}

/// Whether an approval recorded on a merged pull request, not used and not yet looked at by
/// a run, approves the content of the plan pending now: a run is due for it.
pub(super) fn pull_approved_pending(s: &crate::reconcile::Snapshot) -> bool {
    let plan = &s.object.status.plan;
    !plan.pending_digest.is_empty()
        && s.pull_approvals.iter().any(|a| {
            let key = a.key();
            a.digest == plan.pending_digest
                && !a.reviewers.is_empty()
                && !plan.used_pull_approvals.contains(&key)
                && !plan.seen_pull_approvals.contains(&key)
        })
}

enum Approval<'a> {
    /// How: "approved with …", for the status while it is applied.
    Approved(String),
    /// Approved on a merged pull request, for exactly this content.
    Pull(&'a PullApproval),
    Waiting(String),
    PlanOnly,
}

/// Whether this fresh plan may be applied. With `approvePlan: auto` or `spec.force`, yes; with
/// `planOnly`, never. Otherwise only when a human approved it after seeing it pending: the
/// plan with this id and content was pending before this run, and `spec.approvePlan` or the
/// approve annotation was changed to its id since it became pending (see
/// [`crate::api::annotations`]). An approved plan whose re-made content differs is not applied:
/// it becomes the new pending plan ([`super::plan::record_pending`] has recorded the approvals
/// as seen).
fn judge<'a>(
    run: &Run<'a>,
    valid: &ValidSpec,
    plan_id: &str,
    planned: &Planned<'_>,
) -> Approval<'a> {
    let object = &run.s.object;
    let spec = &object.spec;
    if spec.plan_only {
        return Approval::PlanOnly;
    }
    if spec.force {
        return Approval::Approved("applied because spec.force is set".into());
    }
    if valid.approve == ApprovePlan::Auto {
        return Approval::Approved("approved by approvePlan: auto".into());
    }
    let start = run.start();
    let how = format!(
        "review it (tfops plan show, or the Terraform tab in Argo CD), then approve it: Argo CD's approve action, tfops approve, the {} annotation set to {plan_id}@<a new token> with a new {} value, or spec.approvePlan: {plan_id}",
        annotations::APPROVE,
        annotations::RECONCILE
    );
    let was_pending = start.plan.pending == plan_id && !start.plan.pending_digest.is_empty();
    if was_pending && let Some(given) = given(run, valid, plan_id) {
        if start.plan.pending_digest == planned.digest {
            return Approval::Approved(given);
        }
        return Approval::Waiting(format!(
            "plan {plan_id} changed since it was approved (it would now do {}): nothing was applied; {how}",
            planned.summary
        ));
    }
    // An approval given on a merged pull request approves the content its reviewers read:
    // this plan is applied with it only when it does exactly that.
    let unused = unused(run);
    if let Some(approval) = unused.iter().find(|a| a.digest == planned.digest) {
        return Approval::Pull(approval);
    }
    if let Some(approval) = unused.last() {
        return Approval::Waiting(format!(
            "{} differs from the plan approved in {} ({} at {}): nothing was applied; {how}",
            planned.label,
            approval.by(),
            approval.summary,
            short(&approval.head_sha)
        ));
    }
    let annotation = object.annotation(annotations::APPROVE);
    let names_it = annotation.is_some_and(|v| annotations::approved_plan_id(v) == plan_id)
        || matches!(&valid.approve, ApprovePlan::Plan(id) if id == plan_id);
    if names_it {
        let what = if was_pending {
            "was given before this plan was made, or was used already"
        } else {
            "was given before this plan was made"
        };
        return Approval::Waiting(format!(
            "{} awaits approval: the approval present {what}, so it does not count; {how}",
            planned.label
        ));
    }
    let other = match (&valid.approve, annotation) {
        (_, Some(v)) => Some(v),
        (ApprovePlan::Plan(id), None) => Some(id.as_str()),
        _ => None,
    };
    match other {
        Some(v) => Approval::Waiting(format!(
            "approval {v} does not match the pending plan {plan_id}; {how}"
        )),
        None => Approval::Waiting(format!("{} awaits approval: {how}", planned.label)),
    }
}

/// A commit id's first 10 characters.
fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

/// How a human approved `plan_id` since it became pending, when they did: `spec.approvePlan`
/// changed to its id, or the approve annotation changed to a value naming it (see
/// [`crate::api::annotations`]). Whether it was pending is the caller's question.
fn given(run: &Run<'_>, valid: &ValidSpec, plan_id: &str) -> Option<String> {
    let object = &run.s.object;
    let start = run.start();
    let by_spec = matches!(&valid.approve, ApprovePlan::Plan(id) if id == plan_id)
        && object.spec.approve_plan != start.plan.seen_approve_plan;
    if let Some(value) = object.annotation(annotations::APPROVE)
        && annotations::approved_plan_id(value) == plan_id
        && value != start.plan.seen_approval
    {
        // The approve action and `tfops approve` write the time as the token.
        let when = value
            .split_once('@')
            .and_then(|(_, token)| token.trim().parse::<jiff::Timestamp>().ok())
            .map_or_else(|| format!(" ({value})"), |t| format!(" at {t}"));
        return Some(format!(
            "approved with the {} annotation{when}",
            annotations::APPROVE
        ));
    }
    by_spec.then(|| "approved in spec.approvePlan".to_string())
}
