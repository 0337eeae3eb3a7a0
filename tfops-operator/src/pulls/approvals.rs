//! Approvals on pull requests: read from the forge's reviews, recorded on each object's plan
//! of the pull request (in its ConfigMap, where a restarted manager and the reconciler find
//! them), kept across the merge, and followed after it until the approved plan is applied, its
//! apply failed, or the plan at the merge commit turned out to differ.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tfops_core::api::{ObjectKey, TerraformObject};
use tfops_core::conditions::{self, ConditionType, Reason};
use tfops_core::ports::PortError;
use tfops_core::pulls::{
    self, AfterMerge, ApprovalLine, Forge, Merged, Outcome, PullApproval, PullRequest, Review,
};
use tfops_kube::pull_plans::StoredPullPlan;

use super::{Group, Open, Shared};

/// Team members read once per look: (organisation, team) → logins.
#[derive(Default)]
pub(crate) struct Teams(BTreeMap<(String, String), BTreeSet<String>>);

impl Teams {
    /// Whether `login` is one of `object`'s approvers (a listed user, or a member of a listed
    /// team as the forge says now).
    async fn approves(
        &mut self,
        forge: &dyn Forge,
        object: &TerraformObject,
        login: &str,
    ) -> Result<bool, PortError> {
        let Some(approvers) = object
            .spec
            .source_ref
            .pull_requests
            .as_ref()
            .map(|p| &p.approvers)
        else {
            return Ok(false);
        };
        if approvers.users.iter().any(|u| u == login) {
            return Ok(true);
        }
        for (organisation, team) in approvers.team_names() {
            let at = (organisation.to_string(), team.to_string());
            if !self.0.contains_key(&at) {
                let members = forge.team_members(organisation, team).await?;
                self.0.insert(at.clone(), members);
            }
            if self.0.get(&at).is_some_and(|m| m.contains(login)) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The approvers of `object` as configured (logins and teams), for the comment.
fn configured(object: &TerraformObject) -> Vec<String> {
    object
        .spec
        .source_ref
        .pull_requests
        .as_ref()
        .map(|p| {
            p.approvers
                .users
                .iter()
                .chain(p.approvers.teams.iter())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// The approval `reviews` give `plan` of `object` on `pull`, when any approver's counts.
async fn approval_of(
    teams: &mut Teams,
    forge: &dyn Forge,
    object: &TerraformObject,
    pull: &PullRequest,
    plan: &StoredPullPlan,
    reviews: &[Review],
) -> Result<Option<PullApproval>, PortError> {
    let Outcome::Planned { summary, .. } = &plan.plan.outcome else {
        return Ok(None);
    };
    if plan.digest.is_empty() {
        return Ok(None);
    }
    let mut approvers = BTreeSet::new();
    for review in reviews {
        if teams.approves(forge, object, &review.reviewer).await? {
            approvers.insert(review.reviewer.clone());
        }
    }
    let head = &plan.plan_ref.head_sha;
    let reviewers = pulls::approving(reviews, &pull.author, head, |l| approvers.contains(l));
    Ok((!reviewers.is_empty()).then(|| PullApproval {
        number: pull.number,
        head_sha: head.clone(),
        digest: plan.digest.clone(),
        summary: *summary,
        reviewers,
    }))
}

/// Records the approvals of `open`'s plans at its head (those of objects with approvers),
/// reading its reviews once; gives the comment's lines.
pub(crate) async fn record_open(
    shared: &Arc<Shared>,
    group: &Group,
    forge: &dyn Forge,
    open: &Open,
    stored: &[StoredPullPlan],
    teams: &mut Teams,
) -> Result<Vec<ApprovalLine>, PortError> {
    let pull = &open.pull;
    let mut reviews: Option<Vec<Review>> = None;
    let mut lines = Vec::new();
    for (touched, _) in &open.touched {
        let Some(object) = group.object(&touched.key) else {
            continue;
        };
        let approvers = configured(object);
        if approvers.is_empty() {
            continue;
        }
        let plan = stored.iter().find(|s| {
            s.plan_ref.key == touched.key
                && s.plan_ref.number == pull.number
                && s.plan_ref.head_sha == pull.head_sha
        });
        let mut approved_by = Vec::new();
        if let Some(plan) = plan.filter(|p| !p.digest.is_empty()) {
            if reviews.is_none() {
                reviews = Some(forge.reviews(pull.number).await?);
            }
            let said = reviews.as_deref().unwrap_or_default();
            let approval = approval_of(teams, forge, object, pull, plan, said).await?;
            if approval != plan.approval {
                shared
                    .store
                    .set_approval(&touched.key, pull.number, approval.as_ref())
                    .await?;
            }
            approved_by = approval.map(|a| a.reviewers).unwrap_or_default();
        }
        lines.push(ApprovalLine {
            key: touched.key.clone(),
            approvers,
            approved_by,
        });
    }
    Ok(lines)
}

/// At the merge of `plan`'s pull request: records the approvals of `plan` one last time
/// and keeps it, marked merged, when it has any (the object is asked to run at once); gives
/// whether it was kept.
pub(crate) async fn keep_merged(
    shared: &Arc<Shared>,
    group: &Group,
    forge: &dyn Forge,
    plan: &StoredPullPlan,
    merged: &Merged,
    teams: &mut Teams,
) -> Result<bool, PortError> {
    let key = &plan.plan_ref.key;
    let Some(object) = group.object(key) else {
        return Ok(false);
    };
    // Only the plan of the head that was merged carries its approvals across.
    if configured(object).is_empty()
        || plan.digest.is_empty()
        || plan.plan_ref.head_sha != merged.head_sha
    {
        return Ok(false);
    }
    let number = plan.plan_ref.number;
    let reviews = forge.reviews(number).await?;
    let pull = PullRequest {
        number,
        head_sha: plan.plan_ref.head_sha.clone(),
        base_ref: String::new(),
        author: merged.author.clone(),
        from_fork: false,
        changed_files: Vec::new(),
    };
    let Some(approval) = approval_of(teams, forge, object, &pull, plan, &reviews).await? else {
        return Ok(false);
    };
    shared
        .store
        .keep_merged(key, number, &approval, &merged.merge_sha)
        .await?;
    shared.stores.wake(key);
    Ok(true)
}

/// What came of `plan`'s approval after the merge, from its object's status.
fn after_merge(object: &TerraformObject, approval: &PullApproval) -> AfterMerge {
    let status = &object.status;
    let key = approval.key();
    let reason = |c: ConditionType| {
        conditions::find(&status.conditions, c).map(|c| (c.reason.clone(), c.message.clone()))
    };
    if status.plan.used_pull_approvals.contains(&key) {
        let ready = reason(ConditionType::Ready).unwrap_or_default();
        if status.active_run.is_some() || ready.0 == Reason::TerraformApplying.as_str() {
            return AfterMerge::Applying;
        }
        if status.plan.last_applied_digest == approval.digest
            && let Some((r, m)) = reason(ConditionType::Apply)
            && r == Reason::TerraformAppliedSucceed.as_str()
        {
            return AfterMerge::Applied(m);
        }
        return AfterMerge::Failed(ready.1);
    }
    let pending = &status.plan.pending_digest;
    if status.plan.seen_pull_approvals.contains(&key)
        && !pending.is_empty()
        && *pending != approval.digest
    {
        let now = reason(ConditionType::Plan)
            .map(|(_, m)| m)
            .unwrap_or_default();
        return AfterMerge::Differs(now);
    }
    AfterMerge::Waiting
}

/// A merged pull request's approved plan, its approval, and what came of it.
type Followed<'a> = (&'a StoredPullPlan, PullApproval, AfterMerge);

/// Follows the merged pull requests' approved plans of `group`: says on each pull request (and
/// on its merge commit) what came of them when that changed, and removes the record of each
/// that is over.
pub(crate) async fn follow(
    shared: &Arc<Shared>,
    group: &Group,
    forge: &dyn Forge,
    merged: &[StoredPullPlan],
) -> Result<(), PortError> {
    let mut by_pull: BTreeMap<(u64, String), Vec<Followed<'_>>> = BTreeMap::new();
    let mut soon = false;
    for plan in merged {
        let (Some(sha), Some(approval)) = (&plan.merged, &plan.approval) else {
            continue;
        };
        let Some(object) = group.object(&plan.plan_ref.key) else {
            continue;
        };
        let state = after_merge(object, approval);
        // Soon something will come of it: an apply under way, or a plan of the merge commit
        // not made yet.
        let attempted = object
            .status
            .last_attempted_revision
            .as_deref()
            .is_some_and(|r| r.contains(sha.as_str()));
        soon |= matches!(state, AfterMerge::Applying)
            || (matches!(state, AfterMerge::Waiting) && !attempted);
        by_pull
            .entry((plan.plan_ref.number, sha.clone()))
            .or_default()
            .push((plan, approval.clone(), state));
    }
    // While something will soon come of one, the objects' status is looked at again soon
    // (nothing else makes the loop look when an object's run ends).
    if soon {
        again_soon(shared, &group.id);
    }
    for ((number, sha), entries) in by_pull {
        if entries.iter().all(|(p, _, s)| p.reported == s.tag()) {
            continue;
        }
        let lines: Vec<(ObjectKey, PullApproval, AfterMerge)> = entries
            .iter()
            .map(|(p, a, s)| (p.plan_ref.key.clone(), a.clone(), s.clone()))
            .collect();
        forge
            .upsert_comment(number, &pulls::after_merge(&sha, &lines))
            .await?;
        for (plan, _, state) in &entries {
            let key = &plan.plan_ref.key;
            if plan.reported != state.tag() {
                forge.set_status(&sha, &state.status(key), "").await?;
                shared
                    .store
                    .mark_reported(key, number, &state.tag())
                    .await?;
            }
            if state.is_final() {
                shared.store.delete(key, number).await?;
            }
        }
    }
    Ok(())
}

/// How soon a repository with a merged pull request's plan being followed is looked at again.
const FOLLOW_EVERY: std::time::Duration = std::time::Duration::from_secs(3);

/// Asks for a look at repository `id` in [`FOLLOW_EVERY`] (once, however often asked meanwhile).
fn again_soon(shared: &Arc<Shared>, id: &str) {
    let first = shared
        .following
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(id.to_string());
    if !first {
        return;
    }
    let (shared, id) = (shared.clone(), id.to_string());
    tokio::spawn(async move {
        tokio::time::sleep(FOLLOW_EVERY).await;
        shared
            .following
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
        shared.nudge.repository_id(&id);
    });
}

/// Whether `plan` is a merged pull request's record (followed, not planned).
pub(crate) fn is_merged(plan: &StoredPullPlan) -> bool {
    plan.merged.is_some()
}
