//! Setup: the working directory in the runner, and a lock release a user asked for.
//!
//! > Setup. The archive is uploaded; the runner writes backend_override.tf (the Kubernetes
//! > backend by default), generated.auto.tfvars.json from spec.vars/varsFrom/values, any
//! > spec.fileMappings, and the .tfrc from cliConfigSecretRef; then runs init (with -upgrade
//! > and -force-copy) and selects the workspace.

use super::model::{Outcome, Step, StepKind};
use super::run::{Run, Stop, unexpected};
use crate::api::{ForceUnlock, annotations};

/// Sets the runner up and, when a user asked to release the lock that stopped the last run,
/// releases it. Gives the digest of the inputs setup used.
pub(super) fn setup<'a>(run: &mut Run<'a>) -> Result<&'a str, Stop> {
    let inputs_digest = match run.need(Step::Setup)? {
        (
            Outcome::SetUp {
                inputs_digest,
                binary,
                ..
            },
            _,
        ) => {
            run.binary_reported(binary);
            inputs_digest.as_str()
        }
        _ => return Err(unexpected(StepKind::Setup)),
    };
    if run.s.progress.succeeded(StepKind::ForceUnlock) {
        run.lock_released();
    } else if let Some(lock_id) = unlock_requested(run)
        && !run.s.progress.attempted(StepKind::ForceUnlock)
    {
        return Err(Stop::next(Step::ForceUnlock { lock_id }));
    }
    // A requested unlock that failed does not end the run: the lock may have been released by
    // its holder meanwhile, and the next Terraform command says whether it still is.
    Ok(inputs_digest)
}

/// The lock id a user asked to release, if it is the lock that stopped the last run.
pub(super) fn unlock_requested(run: &Run<'_>) -> Option<String> {
    let pending = &run.start().lock.pending;
    if pending.is_empty() {
        return None;
    }
    let object = &run.s.object;
    let by_annotation = object.annotation(annotations::FORCE_UNLOCK) == Some(pending.as_str());
    let by_spec = object.spec.tfstate.force_unlock == ForceUnlock::Yes
        && object.spec.tfstate.lock_identifier == *pending;
    (by_annotation || by_spec).then(|| pending.clone())
}
