//! Restart: a run an earlier driver recorded under way (`status.activeRun`) and left (a
//! restart, an eviction) is taken up before anything else, so that nothing runs twice.

use super::model::{Outcome, Step, StepKind};
use super::run::{End, Got, Run, Stop};
use crate::api::ActiveRun;
use crate::conditions::{ConditionStatus, ConditionType, Reason};

/// Attaches to the recorded run and takes its result. Gives the recorded run when it
/// succeeded; `None` when there was none, or when its runner is gone (its result is unknown:
/// the run goes on from the state, and the `Apply` condition says what happened). A runner
/// that cannot be reached now fails the run and keeps the record, to attach again on the
/// retry.
pub(super) fn restart<'a>(run: &mut Run<'a>) -> Result<Option<&'a ActiveRun>, Stop> {
    let Some(active) = run.start().active_run.as_ref() else {
        return Ok(None);
    };
    match run.got(StepKind::Attach) {
        Got::Todo => Err(Stop::next(Step::Attach {
            runner: active.runner.clone(),
            run_id: active.run_id.clone(),
        })),
        Got::Failed(f) => {
            if f.reason != Reason::RunnerConnectionFailed {
                // The recorded run ended, and it failed: that is its result.
                run.st.active_run = None;
            }
            run.set(
                ConditionType::Apply,
                ConditionStatus::False,
                f.reason,
                format!(
                    "run {} (plan {}): {}",
                    active.run_id, active.plan_id, f.message
                ),
            );
            Err(Stop::End(End::Failed(f.clone())))
        }
        Got::Ok(Outcome::RunGone { why }, _) => {
            run.st.active_run = None;
            run.set(
                ConditionType::Apply,
                ConditionStatus::Unknown,
                Reason::ApplyInterrupted,
                format!(
                    "the apply of plan {} (run {}, started {}) was interrupted and cannot be found ({why}): its result is unknown, so this run plans again from the state",
                    active.plan_id, active.run_id, active.started_at
                ),
            );
            Ok(None)
        }
        Got::Ok(_, _) => {
            run.st.active_run = None;
            Ok(Some(active))
        }
    }
}
