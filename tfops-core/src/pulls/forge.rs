//! The forge a repository lives on (Gitea first): its open pull requests, the one comment
//! tfops keeps on each, commit statuses, and who may write to the repository. One value per
//! repository and token (the object's `spec.sourceRef.pullRequests`).

use async_trait::async_trait;

use super::{CommitStatus, PullComment, PullRequest};
use crate::ports::PortError;

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

    /// Whether pull request `number` was merged (else closed without a merge).
    async fn merged(&self, number: u64) -> Result<bool, PortError>;

    /// Whether `login` may write to the repository (a collaborator with write or admin
    /// permission, or its owner).
    async fn can_write(&self, login: &str) -> Result<bool, PortError>;
}
