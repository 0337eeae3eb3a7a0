//! Which plans of pull requests to make and which to remove: a push supersedes the plans of
//! the earlier head, a close removes every plan of the pull request, and an object a push no
//! longer touches loses its plan.

use super::{PullRequest, Touched};
use crate::api::ObjectKey;

/// A pull request's plan of one object, as stored.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlanRef {
    /// The object.
    pub key: ObjectKey,
    /// The pull request's number.
    pub number: u64,
    /// The head it was made at.
    pub head_sha: String,
}

/// What to do about the plans of pull requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanAction {
    /// Make this plan (at the pull request's head).
    Make(PlanRef),
    /// Remove (and cancel, if being made) this plan: its pull request closed, moved on to
    /// another head, or no longer touches the object.
    Remove(PlanRef),
}

/// The plans to make and remove, given the open pull requests of a repository with the
/// objects each touches and whether its head may be planned ([`super::Trust::allows`]), and
/// the plans stored.
/// Removals first, then what to make, each in a stable order.
pub fn plans_to_make(
    open: &[(PullRequest, Vec<Touched>, bool)],
    stored: &[PlanRef],
) -> Vec<PlanAction> {
    let wanted: Vec<PlanRef> = open
        .iter()
        .filter(|(_, _, allowed)| *allowed)
        .flat_map(|(pull, touched, _)| {
            touched.iter().map(move |t| PlanRef {
                key: t.key.clone(),
                number: pull.number,
                head_sha: pull.head_sha.clone(),
            })
        })
        .collect();
    let mut remove: Vec<PlanRef> = stored
        .iter()
        .filter(|s| !wanted.contains(s))
        .cloned()
        .collect();
    remove.sort();
    remove.dedup();
    let mut make: Vec<PlanRef> = wanted.into_iter().filter(|w| !stored.contains(w)).collect();
    make.sort();
    make.dedup();
    remove
        .into_iter()
        .map(PlanAction::Remove)
        .chain(make.into_iter().map(PlanAction::Make))
        .collect()
}
