//! What the pull request says about approvals: who approved each object's plan while it is
//! open, and after the merge what came of each approved plan (applied, failed, or not applied
//! because the plan at the merge commit does something else), with a status on the merge
//! commit per object.

use super::PullApproval;
use super::comment::MARKER;
use super::statuses::{CommitState, CommitStatus, context, cut, one_line};
use crate::api::ObjectKey;

/// An object's approval, as the open pull request's comment shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalLine {
    /// The object.
    pub key: ObjectKey,
    /// Its approvers' logins and `<organisation>/<team>`s, as configured.
    pub approvers: Vec<String>,
    /// Who approved the plan of the head, for its content (none yet: empty).
    pub approved_by: Vec<String>,
}

/// The section of the open pull request's comment on approvals (empty when no object has
/// approvers).
pub fn approvals_section(lines: &[ApprovalLine]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n#### Approvals\n\n");
    for line in lines {
        let name = format!("`{}/{}`", line.key.namespace, line.key.name);
        if line.approved_by.is_empty() {
            out.push_str(&format!(
                "- {name}: not approved yet (approvers: {})\n",
                line.approvers.join(", ")
            ));
        } else {
            out.push_str(&format!(
                "- {name}: ✅ approved by {} for this content\n",
                line.approved_by.join(", ")
            ));
        }
    }
    out.push_str(
        "\nAn approval counts for the plan of the head it was given on, for that plan's \
         content: after the merge the object's plan at the merge commit is applied without \
         another approval only if it does exactly the same. A push makes it stale.\n",
    );
    out
}

/// What came of an approved plan after the merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterMerge {
    /// The object has not planned the merge commit yet (or planned no changes).
    Waiting,
    /// It is being applied with the approval.
    Applying,
    /// Applied: the apply's message.
    Applied(String),
    /// The apply failed: why.
    Failed(String),
    /// Not applied: the plan at the merge commit (its label) does something else.
    Differs(String),
}

impl AfterMerge {
    /// A short tag of the state, to send each state once.
    pub fn tag(&self) -> String {
        match self {
            Self::Waiting => "waiting".into(),
            Self::Applying => "applying".into(),
            Self::Applied(_) => "applied".into(),
            Self::Failed(_) => "failed".into(),
            Self::Differs(now) => format!("differs {}", crate::digest::sha256_hex(now.as_bytes())),
        }
    }

    /// Whether nothing more will come of it (its record can go).
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Applied(_) | Self::Failed(_))
    }

    /// The status on the merge commit.
    pub fn status(&self, key: &ObjectKey) -> CommitStatus {
        let (state, description) = match self {
            Self::Waiting => (
                CommitState::Pending,
                "waiting for the plan at this commit".into(),
            ),
            Self::Applying => (CommitState::Pending, "applying the approved plan".into()),
            Self::Applied(m) => (CommitState::Success, cut(&one_line(m), 140)),
            Self::Failed(m) => (
                CommitState::Failure,
                cut(&one_line(&format!("apply failed: {m}")), 140),
            ),
            Self::Differs(_) => (
                CommitState::Failure,
                "not applied: the plan here differs from the approved one".into(),
            ),
        };
        CommitStatus {
            context: context(key),
            state,
            description,
        }
    }
}

/// The comment of a merged pull request (merge commit `merge_sha`) whose approved plans are
/// followed: one line per object.
pub fn after_merge(merge_sha: &str, entries: &[(ObjectKey, PullApproval, AfterMerge)]) -> String {
    let short: String = merge_sha.chars().take(12).collect();
    let mut out = format!(
        "{MARKER}\n### tfops: merged as `{short}`\n\nEach plan approved here is applied without \
         another approval when the object's plan at the merge commit does exactly the same.\n\n"
    );
    for (key, approval, state) in entries {
        let name = format!("`{}/{}`", key.namespace, key.name);
        let approved = format!(
            "approved by {} ({})",
            approval.reviewers.join(", "),
            approval.summary
        );
        let line = match state {
            AfterMerge::Waiting => {
                format!("⏳ {name}: {approved}; waiting for its plan at the merge commit")
            }
            AfterMerge::Applying => format!("⏳ {name}: {approved}; being applied"),
            AfterMerge::Applied(m) => format!("✅ {name}: {approved}; {}", cut(&one_line(m), 300)),
            AfterMerge::Failed(m) => format!(
                "❌ {name}: {approved}; the apply failed: {}",
                cut(&one_line(m), 300)
            ),
            AfterMerge::Differs(now) => format!(
                "⚠️ {name}: {approved}; **not applied**: the plan at the merge commit differs \
                 ({}), so it waits for an approval of its own",
                cut(&one_line(now), 300)
            ),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}
