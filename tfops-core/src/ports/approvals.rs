//! Approvals given on a pull request, as the reconciler reads them: each binds reviewers to the
//! content of one object's pull-request plan (its digest), never to a plan id or a commit.

use super::PlanSummary;

/// The approvals of one object's plan on a merged pull request: approvers' approving reviews
/// of the head that was planned, recorded where they survive a restart (in a cluster: the
/// pull request's plan ConfigMap). After the merge, a plan of the object whose content digest
/// is [`PullApproval::digest`] may be applied once without another approval.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PullApproval {
    /// The pull request's number.
    pub number: u64,
    /// The head commit that was planned and approved.
    pub head_sha: String,
    /// The content digest of that plan ([`crate::plan::content_digest`]).
    pub digest: String,
    /// What that plan would do.
    pub summary: PlanSummary,
    /// The approvers whose approving review counted, in the order the forge lists reviews.
    pub reviewers: Vec<String>,
}

impl PullApproval {
    /// What identifies this approval once used (`<number>@<digest>`): an approved content is
    /// applied at most once.
    pub fn key(&self) -> String {
        format!("{}@{}", self.number, self.digest)
    }

    /// `pull request #N by alice, bob`, for messages and history.
    pub fn by(&self) -> String {
        format!(
            "pull request #{} by {}",
            self.number,
            self.reviewers.join(", ")
        )
    }
}
