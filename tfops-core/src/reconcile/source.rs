//! Source: the revision to run, and its tree.
//!
//! > Source. The controller resolves the revision (git ls-remote, or the OCI manifest digest).
//! > If it changed since the last run, the tree is fetched, filtered by ignore, and archived.

use super::dependencies::dependencies;
use super::model::{Outcome, Step, StepKind};
use super::run::{Run, Stop, unexpected};
use crate::ports::Revision;

/// Resolves the revision (recorded as the last attempted one), waits for dependencies of the
/// same source to have applied it, then fetches and archives its tree.
pub(super) fn source(run: &mut Run<'_>) -> Result<Revision, Stop> {
    let revision = resolve(run)?;
    dependencies(run, Some(&revision))?;
    fetch(run)?;
    Ok(revision)
}

/// The tree at the resolved revision, archived.
pub(super) fn fetch(run: &mut Run<'_>) -> Result<(), Stop> {
    run.need(Step::FetchSource).map(drop)
}

/// The source revision: what every run that executes Terraform needs first.
pub(super) fn resolve(run: &mut Run<'_>) -> Result<Revision, Stop> {
    let revision = match run.need(Step::ResolveSource)? {
        (Outcome::Resolved(r), _) => r.clone(),
        _ => return Err(unexpected(StepKind::ResolveSource)),
    };
    run.st.last_attempted_revision = Some(revision.to_string());
    Ok(revision)
}
