//! Runner: the runner Pod the run's Terraform commands go to.
//!
//! > Runner. A Pod `<name>-tf-runner` is created in the object's namespace from spec.runner
//! > (image, ServiceAccount, podTemplate) with a mounted server certificate issued by the
//! > controller's CA. The controller waits for it to become ready (--runner-creation-timeout)
//! > and dials it by Pod IP.
//!
//! With `spec.runner.apply`, a second runner applies ([`super::apply`]). A ResourceQuota that
//! refuses the Pod puts the object in the namespace's queue ([`super::queue`]); the Pod that
//! starts after that takes it out.

use super::model::{Outcome, Step, StepKind};
use super::run::{Run, Stop, unexpected};
use super::waiting;

/// Starts (or reuses) the plan runner and connects.
pub(super) fn runner(run: &mut Run<'_>) -> Result<(), Stop> {
    match run.need(Step::StartRunner)? {
        (Outcome::RunnerStarted { binary, .. }, at) => {
            run.binary_reported(binary);
            waiting::started(run, at);
            Ok(())
        }
        _ => Err(unexpected(StepKind::StartRunner)),
    }
}
