//! The commit statuses a pull request's head gets: one per object it plans
//! (`tfops/<namespace>/<name>`) and one for them all (`tfops`), which branch protection can
//! require.

use super::{ObjectPlan, Outcome, PLAN_COMMAND};
use crate::api::ObjectKey;

/// The context of the status that sums up every object's plan.
pub const AGGREGATE_CONTEXT: &str = "tfops";

/// Forges cut longer descriptions (GitHub at 140 characters); ours stay within.
const DESCRIPTION_MAX: usize = 140;

/// A commit status's state, as forges name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitState {
    /// Planning.
    Pending,
    /// Planned (with or without changes, warnings included).
    Success,
    /// The plan failed, or a policy denies it.
    Failure,
}

impl CommitState {
    /// The forge's name (`pending`, `success`, `failure`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Success => "success",
            Self::Failure => "failure",
        }
    }
}

/// A commit status to set on the pull request's head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitStatus {
    /// `tfops/<namespace>/<name>`, or [`AGGREGATE_CONTEXT`].
    pub context: String,
    /// Its state.
    pub state: CommitState,
    /// What it says (at most 140 characters).
    pub description: String,
}

/// Whether `next` is to be sent for a head whose status of the same context was last sent as
/// `sent` (state and description; none: never sent). Only a change is sent, and a status only
/// moves forward for a head: a verdict (success, failure) is never replaced by `pending`. A
/// pass that sees the head's plan as neither stored nor under way (a read of the stored plans
/// that lags the store that just ended the plan) would otherwise take the verdict back; a new
/// plan of the same head replaces the verdict with its own when it ends.
pub fn replaces(sent: Option<(CommitState, &str)>, next: &CommitStatus) -> bool {
    match sent {
        None => true,
        Some((state, description)) if state == next.state => description != next.description,
        Some((state, _)) => state == CommitState::Pending || next.state != CommitState::Pending,
    }
}

/// The status context of `key`'s plan.
pub fn context(key: &ObjectKey) -> String {
    format!("{AGGREGATE_CONTEXT}/{}/{}", key.namespace, key.name)
}

/// One status per object plan, then the aggregate: failure when any failed or is denied, else
/// pending while any is being planned, else success. No plans (the pull request touches no
/// object): the aggregate alone, success.
pub fn statuses(plans: &[ObjectPlan]) -> Vec<CommitStatus> {
    let mut out: Vec<CommitStatus> = plans.iter().map(one).collect();
    let count = |s: CommitState| out.iter().filter(|c| c.state == s).count();
    let (failed, pending) = (count(CommitState::Failure), count(CommitState::Pending));
    let (state, description) = if plans.is_empty() {
        (
            CommitState::Success,
            "touches no Terraform object".to_string(),
        )
    } else if failed > 0 {
        (
            CommitState::Failure,
            format!("{failed} of {} failed or denied", objects(plans.len())),
        )
    } else if pending > 0 {
        (
            CommitState::Pending,
            format!("planning or waiting: {pending} of {}", objects(plans.len())),
        )
    } else {
        (
            CommitState::Success,
            format!("{} planned", objects(plans.len())),
        )
    };
    out.push(CommitStatus {
        context: AGGREGATE_CONTEXT.to_string(),
        state,
        description,
    });
    out
}

/// "1 object", "3 objects".
fn objects(n: usize) -> String {
    if n == 1 {
        "1 object".into()
    } else {
        format!("{n} objects")
    }
}

fn one(plan: &ObjectPlan) -> CommitStatus {
    let (state, description) = match &plan.outcome {
        Outcome::Planning => (CommitState::Pending, "planning".to_string()),
        Outcome::NotPlanned { .. } => (
            CommitState::Pending,
            format!("not planned until a trusted user comments {PLAN_COMMAND} <head sha>"),
        ),
        Outcome::Planned {
            summary, denials, ..
        } if !denials.is_empty() => (
            CommitState::Failure,
            format!("{summary}, denied by policy: {}", denials.join("; ")),
        ),
        Outcome::Planned {
            summary,
            replaced,
            warnings,
            ..
        } => {
            let mut d = summary.to_string();
            if !replaced.is_empty() {
                d.push_str(&format!(", {} replaced", replaced.len()));
            }
            if !warnings.is_empty() {
                d.push_str(&format!(", {} policy warnings", warnings.len()));
            }
            (CommitState::Success, d)
        }
        Outcome::Failed { reason, message } => (
            CommitState::Failure,
            format!("{reason}: {}", one_line(message)),
        ),
    };
    CommitStatus {
        context: context(&plan.key),
        state,
        description: cut(&description, DESCRIPTION_MAX),
    }
}

/// `text` cut to at most `max` characters, an ellipsis marking the cut.
pub(super) fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `text` on one line: every run of whitespace (newlines included) one space.
pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod replacing {
    use super::*;

    fn status(state: CommitState, description: &str) -> CommitStatus {
        CommitStatus {
            context: AGGREGATE_CONTEXT.into(),
            state,
            description: description.into(),
        }
    }

    #[test]
    fn a_verdict_is_never_taken_back_by_pending_and_changes_are_sent_once() {
        use CommitState::*;
        let planning = status(Pending, "planning");
        assert!(replaces(None, &planning), "the first is sent");
        assert!(
            !replaces(Some((Pending, "planning")), &planning),
            "sent once"
        );
        for verdict in [Success, Failure] {
            assert!(replaces(
                Some((Pending, "planning")),
                &status(verdict, "+1 ~0 -0")
            ));
            assert!(
                !replaces(Some((verdict, "+1 ~0 -0")), &planning),
                "{verdict:?} taken back by pending"
            );
        }
        // A new verdict for the same head (a new plan of it ended) replaces the old one.
        assert!(replaces(
            Some((Success, "+1 ~0 -0")),
            &status(Failure, "denied")
        ));
        assert!(replaces(
            Some((Failure, "plan failed")),
            &status(Success, "+0 ~1 -0")
        ));
        assert!(!replaces(
            Some((Success, "+1 ~0 -0")),
            &status(Success, "+1 ~0 -0")
        ));
    }
}
