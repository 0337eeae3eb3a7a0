//! Plans of pull requests, decided purely (no clock, no IO): which objects a pull request
//! plans ([`touched`]), whose heads may be planned ([`trust`]), which plans a push or a close
//! makes stale ([`plans_to_make`]), and what the pull request shows ([`comment`],
//! [`statuses`]); and the port to the forge that shows it ([`Forge`]).
//!
//! A pull request's plan is speculative: made at its head, read-only on the object's state,
//! never applied, and shown to reviewers. The object's own status and pending plan are not
//! touched by it.

mod approvals;
mod comment;
mod forge;
mod merged;
mod plans;
mod speculative;
mod statuses;
mod trust;

pub use approvals::{PullApproval, Review, ReviewState, approving};
pub use comment::{COMMENT_BUDGET, MARKER, closed, comment};
pub use forge::{Forge, Merged};
pub use merged::{AfterMerge, ApprovalLine, after_merge, approvals_section};
pub use plans::{PlanAction, PlanRef, plans_to_make};
pub use speculative::{SpeculativePlan, at_commit, plan_pull_request, replaced};
pub use statuses::{AGGREGATE_CONTEXT, CommitState, CommitStatus, context, replaces, statuses};
pub use trust::{PLAN_COMMAND, PullComment, Trust, trust};

use crate::api::{ForgeRepository, ObjectKey, TerraformObject};
use crate::ports::PlanSummary;
use crate::source::{SourceChanges, Watched};

/// An open pull request, as the forge describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    /// Its number in the repository.
    pub number: u64,
    /// The commit at its head.
    pub head_sha: String,
    /// The branch it would merge into.
    pub base_ref: String,
    /// Who opened it (a forge login).
    pub author: String,
    /// Its head lives in another repository (a fork).
    pub from_fork: bool,
    /// The files it changes, relative to the repository's root.
    pub changed_files: Vec<String>,
}

/// An object a pull request plans, and why: the first changed file that concerns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Touched {
    /// The object.
    pub key: ObjectKey,
    /// Its `spec.path`.
    pub path: String,
    /// A changed file under its path or matching its `watchPaths` (or why every change
    /// concerns it).
    pub because: String,
}

/// The objects of `objects` that `pull` plans: those whose `spec.sourceRef.pullRequests`
/// names `repository`, that follow the branch the pull request merges into (an object pinned
/// to a tag or a commit follows none), and whose `spec.path` or `watchPaths` holds a changed
/// file. In the order of `objects`.
pub fn touched(
    pull: &PullRequest,
    repository: &ForgeRepository,
    objects: &[TerraformObject],
) -> Vec<Touched> {
    let changes = SourceChanges::Files(pull.changed_files.clone());
    objects
        .iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none())
        .filter(|o| follows(o, repository, &pull.base_ref))
        .filter_map(|o| {
            let spec = &o.spec;
            // Validation refuses bad patterns before an object reaches here; such an object
            // is not planned.
            let watched = Watched::new(&spec.path, &spec.source_ref.watch_paths).ok()?;
            let because = watched.touched(&changes)?;
            Some(Touched {
                key: o.key(),
                path: spec.path.clone(),
                because,
            })
        })
        .collect()
}

/// Whether `object` plans pull requests of `repository` into `base`.
fn follows(object: &TerraformObject, repository: &ForgeRepository, base: &str) -> bool {
    let source = &object.spec.source_ref;
    let Some(pulls) = &source.pull_requests else {
        return false;
    };
    let reference = &source.reference;
    let branch = match reference.set_fields().as_slice() {
        [] => "main",
        [("branch", b)] => b,
        _ => return false,
    };
    branch == base && pulls.repository(&source.url).as_ref() == Ok(repository)
}

/// What a pull request's plan of one object came to, as the comment and statuses show it
/// (and as it is stored, in JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum Outcome {
    /// Being planned.
    Planning,
    /// Planned.
    Planned {
        /// Change counts.
        summary: PlanSummary,
        /// Resources it would replace (destroy and create again).
        replaced: Vec<String>,
        /// Policy findings that warn.
        warnings: Vec<String>,
        /// Policy findings that deny: such a plan could never be applied.
        denials: Vec<String>,
        /// The plan as Terraform shows it (its own masking of sensitive values kept).
        text: String,
    },
    /// Not planned: the head is not trusted (the text says why, and how to plan it).
    NotPlanned {
        /// Why, and the command a trusted user comments to plan this head.
        why: String,
    },
    /// The plan failed.
    Failed {
        /// The reason (a condition reason, `TFExecPlanFailed` …).
        reason: String,
        /// What failed, in words.
        message: String,
    },
}

/// One object's plan of a pull request, at its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPlan {
    /// The object.
    pub key: ObjectKey,
    /// Its `spec.path`.
    pub path: String,
    /// What came of it.
    pub outcome: Outcome,
}
