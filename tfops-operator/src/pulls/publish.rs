//! What a pull request shows: the one comment (edited in place) and a commit status per object
//! and for them all, each sent only when it changed since it was last sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tfops_core::api::ObjectKey;
use tfops_core::ports::PortError;
use tfops_core::pulls::{self, Forge, ObjectPlan, Outcome, PlanRef};
use tfops_kube::pull_plans::{StoredPullPlan, pull_plan_name};

use super::{Group, Open, Shared};

/// A status as sent: (repository, sha, context).
type StatusKey = (String, String, String);

/// What was last sent to the forge: comment bodies by (repository, pull request), statuses by
/// (repository, sha, context). Lost on restart, which only sends each once more.
#[derive(Default)]
pub(crate) struct Published {
    comments: Mutex<BTreeMap<(String, u64), String>>,
    statuses: Mutex<BTreeMap<StatusKey, (pulls::CommitState, String)>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where the whole plan of `key` is, for a plan the comment leaves out.
fn hint(key: &ObjectKey, number: u64) -> String {
    format!(
        "The whole plan: `tfops pr {} -n {} --show {number}`, or the ConfigMap `{}` in `{}`.",
        key.name,
        key.namespace,
        pull_plan_name(&key.name, number),
        key.namespace
    )
}

/// The plans of `open` as they stand: not planned, being planned, or what was stored at its
/// head.
pub(crate) fn plans_of(
    shared: &Shared,
    group: &Group,
    open: &Open,
    stored: &[StoredPullPlan],
) -> Vec<ObjectPlan> {
    let pull = &open.pull;
    open.touched
        .iter()
        .map(|(t, trust)| {
            let plan_ref = PlanRef {
                key: t.key.clone(),
                number: pull.number,
                head_sha: pull.head_sha.clone(),
            };
            let outcome = match trust {
                pulls::Trust::Untrusted(why) => Outcome::NotPlanned { why: why.clone() },
                _ if shared.tasks.is_running(&group.id, &plan_ref) => Outcome::Planning,
                _ => stored
                    .iter()
                    .find(|s| s.plan_ref == plan_ref)
                    .map_or(Outcome::Planning, |s| s.plan.outcome.clone()),
            };
            ObjectPlan {
                key: t.key.clone(),
                path: t.path.clone(),
                outcome,
            }
        })
        .collect()
}

/// Sends `open`'s comment and statuses where they changed.
pub(crate) async fn publish(
    shared: &Arc<Shared>,
    group: &Group,
    forge: &dyn Forge,
    open: &Open,
    stored: &[StoredPullPlan],
    approvals: &[pulls::ApprovalLine],
) -> Result<(), PortError> {
    let pull = &open.pull;
    let plans = plans_of(shared, group, open, stored);
    // The approvals' section is short (a line per object): it fits the forge's limit beside
    // the comment's budget.
    let mut body = pulls::comment(&pull.head_sha, &plans, pulls::COMMENT_BUDGET, |k| {
        hint(k, pull.number)
    });
    body.push_str(&pulls::approvals_section(approvals));
    comment(shared, group, forge, pull.number, body).await?;
    for status in pulls::statuses(&plans) {
        let key = (
            group.id.clone(),
            pull.head_sha.clone(),
            status.context.clone(),
        );
        let sent = locked(&shared.published.statuses)
            .get(&key)
            .map(|(state, said)| (*state, said.clone()));
        if !pulls::replaces(sent.as_ref().map(|(s, d)| (*s, d.as_str())), &status) {
            continue;
        }
        tracing::debug!(pull = pull.number, sha = %pull.head_sha, context = %status.context, state = status.state.as_str(), description = %status.description, "setting a commit status");
        forge.set_status(&pull.head_sha, &status, "").await?;
        locked(&shared.published.statuses).insert(key, (status.state, status.description.clone()));
    }
    Ok(())
}

/// Says on pull request `number` that it closed and its plans went.
pub(crate) async fn closed(
    shared: &Arc<Shared>,
    group: &Group,
    forge: &dyn Forge,
    number: u64,
) -> Result<(), PortError> {
    let merged = forge.merged(number).await?;
    comment(
        shared,
        group,
        forge,
        number,
        pulls::closed(merged.is_some()),
    )
    .await
}

async fn comment(
    shared: &Arc<Shared>,
    group: &Group,
    forge: &dyn Forge,
    number: u64,
    body: String,
) -> Result<(), PortError> {
    let key = (group.id.clone(), number);
    if locked(&shared.published.comments).get(&key) == Some(&body) {
        return Ok(());
    }
    forge.upsert_comment(number, &body).await?;
    locked(&shared.published.comments).insert(key, body);
    Ok(())
}
