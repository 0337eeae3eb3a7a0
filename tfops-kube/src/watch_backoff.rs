//! How long a watch waits before it asks the API server again after an error.
//!
//! kube-runtime's default follows client-go: 0.8 s doubling to 30 s (plus up to as much again
//! of jitter), reset only after 120 s without an error. An API server away for ten seconds
//! gives every watch several errors in a row, and the first request after it returns is a
//! watch from a resourceVersion the restarted server no longer has (`410 Gone`), one error
//! more: measured on the real kube-apiserver, the manager then saw the next change to an
//! object 112–120 s after the server was back. tfops watches few kinds, from one manager, so
//! it can afford to look again sooner: 0.25 s doubling to 4 s (jittered), reset after 30 s
//! without an error. While the server is away that is at most a request every 4 s per watch
//! (no hot loop); once it is back, a watch resumes within about 8 s.

use std::time::Duration;

use kube_runtime::utils::{Backoff, ResetTimerBackoff};

/// The first wait after an error.
pub const FIRST: Duration = Duration::from_millis(250);
/// The longest wait (before jitter, which adds up to as much again).
pub const LONGEST: Duration = Duration::from_secs(4);
/// Errors this far apart start again from [`FIRST`].
pub const RESET_AFTER: Duration = Duration::from_secs(30);

/// The backoff of every watch tfops keeps (the controller's objects, its relations and
/// quotas, a runner Pod's session, the runner Pod metrics); see the module's text.
pub fn watch_backoff() -> impl Backoff {
    ResetTimerBackoff::new(Exponential::new(), RESET_AFTER)
}

/// No wait at all: for a stream whose every source already waits on its own (the
/// controller's merged triggers), so that one watch's error does not hold the others' events
/// back. kube-runtime applies its default to the merged stream unless told otherwise.
pub fn already_waited() -> impl Backoff {
    AlreadyWaited
}

struct AlreadyWaited;

impl Iterator for AlreadyWaited {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for AlreadyWaited {
    fn reset(&mut self) {}
}

/// Doubling from [`FIRST`] to [`LONGEST`], jittered.
struct Exponential {
    builder: backon::ExponentialBuilder,
    delays: backon::ExponentialBackoff,
}

impl Exponential {
    fn new() -> Self {
        use backon::BackoffBuilder;
        let builder = backon::ExponentialBuilder::default()
            .with_min_delay(FIRST)
            .with_max_delay(LONGEST)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            delays: builder.build(),
            builder,
        }
    }
}

impl Iterator for Exponential {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.delays.next()
    }
}

impl Backoff for Exponential {
    fn reset(&mut self) {
        use backon::BackoffBuilder;
        self.delays = self.builder.build();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_at_most_twice_the_longest_and_start_again_after_a_reset() {
        let mut backoff = Exponential::new();
        let waits: Vec<Duration> = (&mut backoff).take(12).collect();
        assert_eq!(waits.len(), 12, "it never gives up");
        assert!(waits[0] >= FIRST && waits[0] < FIRST * 2, "{waits:?}");
        assert!(waits.iter().all(|w| *w <= LONGEST * 2), "{waits:?}");
        assert!(waits[11] >= LONGEST, "{waits:?}");
        backoff.reset();
        let first = backoff.next().unwrap();
        assert!(first < FIRST * 2, "{first:?}");
    }
}
