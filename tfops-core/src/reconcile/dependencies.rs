//! Dependencies: the objects named by `spec.dependsOn` come first.
//!
//! > Dependencies. If spec.dependsOn is set, every dependency must be Ready at its current
//! > generation (and, for the same source, at the same revision); otherwise the object is
//! > Progressing/DependencyNotReady and is retried.
//!
//! Waiting is not a failure: nothing is marked handled, and the check repeats after
//! `retryInterval`.

use super::run::{End, Run, Stop};
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::ports::Revision;

/// Stops the run, waiting, while a dependency is missing or not Ready at its generation; once
/// the source is resolved (`revision`), also while one built from the same source has not
/// applied that revision.
pub(super) fn dependencies(run: &mut Run<'_>, revision: Option<&Revision>) -> Result<(), Stop> {
    let waiting = match revision {
        None => not_ready(run),
        Some(revision) => behind(run, revision),
    };
    if waiting.is_empty() {
        return Ok(());
    }
    run.set(
        ConditionType::Ready,
        ConditionStatus::Unknown,
        Reason::DependencyNotReady,
        format!("waiting for dependencies: {}", waiting.join("; ")),
    );
    Err(Stop::End(End::Waiting))
}

fn not_ready(run: &Run<'_>) -> Vec<String> {
    run.s
        .dependencies
        .iter()
        .filter_map(|d| match &d.found {
            None => Some(format!("{} does not exist", d.key)),
            Some(v) if !v.is_ready() => Some(format!(
                "{} is not Ready at its current generation ({})",
                d.key,
                if v.ready_reason.is_empty() {
                    "no Ready condition"
                } else {
                    &v.ready_reason
                }
            )),
            Some(_) => None,
        })
        .collect()
}

/// A dependency built from the same source must have applied the same revision first.
fn behind(run: &Run<'_>, revision: &Revision) -> Vec<String> {
    let mine = &run.s.object.spec.source_ref.url;
    let revision = revision.to_string();
    run.s
        .dependencies
        .iter()
        .filter_map(|d| {
            let v = d.found.as_ref()?;
            (v.source_url == *mine && v.last_applied_revision.as_deref() != Some(revision.as_str()))
                .then(|| format!("{} has not applied {revision} yet", d.key))
        })
        .collect()
}
