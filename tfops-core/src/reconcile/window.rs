//! Apply windows: an apply starts only while `spec.applyWindows` lets one start.
//!
//! Plans and drift checks run at any time; an approved or automatic plan (and the destroy
//! plan of a deletion) waits outside a window, with `Ready=Unknown`, reason
//! `ApplyWindowClosed`, naming the next opening, and the object is requeued for it (the
//! trigger makes the run due when the window opens: [`super::timing::due`]). `spec.force`
//! ignores windows. Once this run's apply was attempted, windows no longer matter: an apply
//! under way finishes, and its result is recorded.

use std::time::Duration;

use super::model::StepKind;
use super::run::{End, Run, Stop};
use super::timing::elapsed;
use crate::conditions::{ConditionStatus, ConditionType, Reason};
use crate::windows::Gate;

/// Whether an apply may start now as far as `spec.applyWindows` says (at the run's start:
/// nothing attempted yet).
pub(super) fn open_now(run: &Run<'_>) -> bool {
    let s = run.s;
    s.object.spec.force || run.windows.is_empty() || matches!(run.windows.gate(s.now), Gate::Open)
}

/// Goes on when an apply may start now; otherwise ends the run until the next opening.
/// `what`: the plan to apply, for the message (`plan … at …`).
pub(super) fn window(run: &mut Run<'_>, what: &str) -> Result<(), Stop> {
    let s = run.s;
    if s.object.spec.force || run.windows.is_empty() || s.progress.attempted(StepKind::Apply) {
        return Ok(());
    }
    let Gate::Closed {
        opens,
        searched,
        why,
    } = run.windows.gate(s.now)
    else {
        return Ok(());
    };
    let opens_in = opens.map(|t| elapsed(s.now, t));
    let when = match (opens, opens_in) {
        (Some(t), Some(d)) => format!(
            "it is applied when the next window opens, at {t} (in {})",
            crate::duration::format(d.max(Duration::from_secs(1)))
        ),
        _ => format!(
            "no window opens before {searched} (as far as tfops looks ahead): change spec.applyWindows, or set spec.force"
        ),
    };
    run.set(
        ConditionType::Ready,
        ConditionStatus::Unknown,
        Reason::ApplyWindowClosed,
        format!("{what} may be applied, but no apply starts now ({why}); {when}"),
    );
    Err(Stop::End(End::WindowClosed(opens_in)))
}
