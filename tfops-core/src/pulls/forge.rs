//! The forge a repository lives on (Gitea first): its open pull requests, the one comment
//! tfops keeps on each, commit statuses, and who may write to the repository. One value per
//! repository and token (the object's `spec.sourceRef.pullRequests`).

use async_trait::async_trait;

use super::{CommitStatus, PullComment, PullRequest, Review};
use crate::ports::PortError;

/// A merged pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The merge commit.
    pub merge_sha: String,
    /// Who opened the pull request.
    pub author: String,
    /// The head commit that was merged.
    pub head_sha: String,
}

/// A repository's pull requests, through the forge's API with one token.
#[async_trait]
pub trait Forge: Send + Sync {
    /// The open pull requests, each with the files it changes.
    async fn open_pull_requests(&self) -> Result<Vec<PullRequest>, PortError>;

    /// Makes `body` the pull request's tfops comment: edits the comment of this token's user
    /// that starts with [`super::MARKER`], or adds one. A comment of anyone else is
    /// never edited, marker or not.
    async fn upsert_comment(&self, number: u64, body: &str) -> Result<(), PortError>;

    /// Sets `status` on commit `sha`, pointing to `target_url` when not empty.
    async fn set_status(
        &self,
        sha: &str,
        status: &CommitStatus,
        target_url: &str,
    ) -> Result<(), PortError>;

    /// The comments on pull request `number`, oldest first (where `/tfops plan` is asked).
    async fn comments(&self, number: u64) -> Result<Vec<PullComment>, PortError>;

    /// Pull request `number`'s merge when it was merged (`None`: closed without a merge, or
    /// still open).
    async fn merged(&self, number: u64) -> Result<Option<Merged>, PortError>;

    /// The reviews of pull request `number`, oldest first.
    async fn reviews(&self, number: u64) -> Result<Vec<Review>, PortError>;

    /// The logins of the members of `team` of organisation `organisation` (none when there is
    /// no such team).
    async fn team_members(
        &self,
        organisation: &str,
        team: &str,
    ) -> Result<std::collections::BTreeSet<String>, PortError>;

    /// Whether `login` may write to the repository (a collaborator with write or admin
    /// permission, or its owner).
    async fn can_write(&self, login: &str) -> Result<bool, PortError>;
}
