//! Waiting for a runner Pod, as the decision writes it: `Ready` while the object waits in its
//! namespace's queue ([`super::queue`]), and when a Pod started for it.

use std::time::Duration;

use super::queue::{wait_after, waiting_since};
use super::run::Run;
use crate::conditions::{self, ConditionStatus, ConditionType, Reason};
use crate::duration::elapsed;

/// The run waits for a runner Pod (`detail` says why: the quota's refusal, or what the queue
/// sees), the attempt (or look) ending at `at`: `Ready=Unknown` `RunnerQuotaExhausted` from
/// the time it started waiting, with its place, how long it has waited and when it tries
/// again; gives that wait.
pub(super) fn wait(
    run: &mut Run<'_>,
    detail: &str,
    attempted: bool,
    at: jiff::Timestamp,
) -> Duration {
    let since = waiting_since(run.start()).unwrap_or(at);
    let object = &run.s.object;
    let again = wait_after(object, since, at, run.retry_interval, run.interval);
    let waited = elapsed(since, at);
    let mut facts = Vec::new();
    if let Some(p) = run.s.queue.place {
        facts.push(format!("position {} of {}", p.position, p.of));
    }
    if !waited.is_zero() {
        facts.push(format!(
            "waiting {}",
            crate::duration::format(whole(waited))
        ));
    }
    let facts = if facts.is_empty() {
        String::new()
    } else {
        format!(" ({})", facts.join(", "))
    };
    let next = if attempted { "retry" } else { "next look" };
    let message = format!(
        "waiting for a runner Pod: {detail}{facts}; {next} in {}",
        crate::duration::format(whole(again))
    );
    run.set(
        ConditionType::Ready,
        ConditionStatus::Unknown,
        Reason::RunnerQuotaExhausted,
        message,
    );
    // The wait's start, kept while it waits: `set` moves the transition time only when the
    // status changes, and Ready may have been Unknown already (a first run).
    if let Some(c) = run
        .st
        .conditions
        .iter_mut()
        .find(|c| c.type_ == ConditionType::Ready.as_str())
    {
        c.last_transition_time = since;
    }
    again
}

/// A runner Pod started for an object that waited for one: it leaves the queue
/// (`Ready=Unknown`, `Progressing`), saying how long it waited.
pub(super) fn started(run: &mut Run<'_>, at: jiff::Timestamp) {
    if conditions::find(&run.st.conditions, ConditionType::Ready)
        .is_none_or(|c| c.reason != Reason::RunnerQuotaExhausted.as_str())
    {
        return;
    }
    let waited = waiting_since(run.start()).map_or(Duration::ZERO, |s| elapsed(s, at));
    run.set(
        ConditionType::Ready,
        ConditionStatus::Unknown,
        Reason::Progressing,
        format!(
            "a runner Pod started after waiting {} for one",
            crate::duration::format(whole(waited))
        ),
    );
}

/// Whole seconds, for messages (a wait of 17.4 s reads "17s").
fn whole(d: Duration) -> Duration {
    if d < Duration::from_secs(1) {
        d
    } else {
        Duration::from_secs(d.as_secs())
    }
}
