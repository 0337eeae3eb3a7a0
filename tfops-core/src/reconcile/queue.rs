//! Waiting for a runner Pod: the queue of a namespace whose ResourceQuota refuses more Pods.
//!
//! A quota that refuses the runner Pod does not fail the run: the object waits, with
//! `Ready=Unknown`, reason `RunnerQuotaExhausted`, and that condition's `lastTransitionTime`
//! the moment it started waiting (kept while it waits, so that the number of waiters and how
//! long each has waited can be read from the objects alone). It counts no failure, so
//! `spec.remediation.retries` never stalls a queue.
//!
//! The queue of a namespace is its waiters ordered by that time, the longest waiter first
//! ([`order`]). Only the driver's caller sees every object of the namespace and its quotas (the
//! controller, from its caches), so it says where this object stands and whether a runner Pod
//! may start for it now ([`RunnerQueue`]): the first `n` waiters when the quotas have room for
//! `n` more Pods ([`slot`]). Others neither attempt nor fetch their source; they look again when
//! the quota changes or after their wait.
//!
//! Without that knowledge (local mode, a quota on CPU or memory rather than on Pods, quotas
//! that cannot be read), a waiter retries on its own: after a wait drawn with full jitter from
//! a backoff as long as it has waited so far (between `retryInterval` and `interval`,
//! [`backoff`]), so that the waiters of one namespace do not all retry at the same moment. The
//! draw is a hash of the object and of the time of its last attempt ([`jitter`]): the decision
//! stays pure (deciding twice gives the same wait) and the wait can be recomputed from status.

use std::time::Duration;

use crate::api::{ObjectKey, TerraformObject, TerraformStatus};
use crate::conditions::{self, ConditionType, Reason};

/// Where an object stands among those waiting for a runner Pod in its namespace, and whether
/// one may start for it now, as the driver's caller sees them. The default knows nothing:
/// every run goes as it would without a queue, and a waiter retries after its jittered wait.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunnerQueue {
    /// Its place in the queue (for an object not waiting, the place it would take: last).
    pub place: Option<Place>,
    /// Whether a runner Pod may start for it now.
    pub slot: Slot,
}

/// A place in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// From 1, the longest waiter.
    pub position: usize,
    /// How many wait (this object included).
    pub of: usize,
}

/// Whether a runner Pod may start for an object now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Slot {
    /// Not known (no quota limits the namespace's Pods, or its quotas cannot be read): runs go
    /// ahead, and a waiter retries after its jittered wait.
    #[default]
    Unknown,
    /// The quotas have room for a Pod, and no one waiting longer is due to take it: a waiter
    /// starts its run now.
    Free,
    /// No Pod may start for it now: the quotas have no room, or the room there is goes to
    /// objects waiting longer. The run starts no Pod and waits (`why` says for what).
    Full {
        /// What stops it, for the message (e.g. "the ResourceQuota pods in team-a allows no
        /// more Pods (used 1 of 1)").
        why: String,
    },
}

/// An object waiting for a runner Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// The object.
    pub key: ObjectKey,
    /// When it started waiting.
    pub since: jiff::Timestamp,
}

/// When the object started waiting for a runner Pod, if it waits: its `Ready` condition has
/// the reason `RunnerQuotaExhausted`, and that condition's `lastTransitionTime` is the time.
pub fn waiting_since(status: &TerraformStatus) -> Option<jiff::Timestamp> {
    conditions::find(&status.conditions, ConditionType::Ready)
        .filter(|c| c.reason == Reason::RunnerQuotaExhausted.as_str())
        .map(|c| c.last_transition_time)
}

/// The object as a waiter, if it waits.
pub fn waiter(object: &TerraformObject) -> Option<Waiter> {
    waiting_since(&object.status).map(|since| Waiter {
        key: object.key(),
        since,
    })
}

/// Orders waiters as the queue does: the longest waiter first, equal times by namespace and
/// name (so every reader of the same objects sees the same queue).
pub fn order(waiters: &mut [Waiter]) {
    waiters.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.key.cmp(&b.key)));
}

/// The place of `key` in `ordered` waiters; one not among them would come last.
pub fn place(ordered: &[Waiter], key: &ObjectKey) -> Place {
    match ordered.iter().position(|w| &w.key == key) {
        Some(i) => Place {
            position: i + 1,
            of: ordered.len(),
        },
        None => Place {
            position: ordered.len() + 1,
            of: ordered.len() + 1,
        },
    }
}

/// Whether a runner Pod may start for the object at `place`, when the namespace's quotas have
/// room for `free` more Pods (`None`: no quota counts Pods, or none can be read).
///
/// With a count, the first `free` places may start and the others wait ([`Slot::Full`], `why`
/// given the room there is). Without one, only the longest waiter is given its turn. Either
/// turn is withheld when this object was refused a Pod under the very quotas seen now
/// (`refused_here`: another limit refused it, CPU or memory, or another object took the room
/// first): it retries after its jittered wait, or when the quotas change.
pub fn slot(
    place: Place,
    waiting: bool,
    free: Option<u64>,
    refused_here: bool,
    why: impl FnOnce(u64) -> String,
) -> Slot {
    let position = u64::try_from(place.position).unwrap_or(u64::MAX);
    match free {
        Some(free) if position > free => Slot::Full { why: why(free) },
        _ if refused_here => Slot::Unknown,
        Some(_) => Slot::Free,
        None if waiting && position == 1 => Slot::Free,
        None => Slot::Unknown,
    }
}

/// The backoff of a waiter that has waited `waited`: as long again, between `retry_interval`
/// and the larger of `interval` and `retry_interval`. Retrying after a uniform draw from it
/// makes the expected wait grow half as fast as the time waited, as a doubling backoff does,
/// without counting attempts.
pub fn backoff(retry_interval: Duration, interval: Duration, waited: Duration) -> Duration {
    waited.clamp(retry_interval, interval.max(retry_interval))
}

/// A draw from `[min(1 s, backoff), backoff]` ("full jitter"; the second keeps a status
/// write from waking its own object into another attempt), from a hash of the object (`seed`:
/// its key and uid) and the time of its last attempt: the same inputs give the same wait,
/// different objects of one namespace different ones.
pub fn jitter(seed: &str, at: jiff::Timestamp, backoff: Duration) -> Duration {
    let text = format!("{seed}@{}", at.as_millisecond());
    let digest = crate::digest::sha256_hex(text.as_bytes());
    // The first 16 hex digits: 64 bits of the hash.
    let draw = u64::from_str_radix(&digest[..16], 16).unwrap_or(0);
    let span = backoff.as_millis();
    let ms = (span * u128::from(draw)) >> 64;
    let floor = Duration::from_secs(1).min(backoff);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)).max(floor)
}

/// The seed of an object's draws.
fn seed(object: &TerraformObject) -> String {
    format!("{}/{}", object.key(), object.metadata.uid)
}

/// How long after its last attempt (or look at the quotas) a waiting object tries again on
/// its own, from its status; `None` when it does not wait or has no last attempt.
pub fn retry_wait(
    object: &TerraformObject,
    retry_interval: Duration,
    interval: Duration,
) -> Option<Duration> {
    let since = waiting_since(&object.status)?;
    let last = object.status.last_run_at?;
    Some(wait_after(object, since, last, retry_interval, interval))
}

/// The wait after an attempt (or look) at `last` of an object waiting since `since`.
pub(super) fn wait_after(
    object: &TerraformObject,
    since: jiff::Timestamp,
    last: jiff::Timestamp,
    retry_interval: Duration,
    interval: Duration,
) -> Duration {
    let waited = crate::duration::elapsed(since, last);
    jitter(
        &seed(object),
        last,
        backoff(retry_interval, interval, waited),
    )
}
