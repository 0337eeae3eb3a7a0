//! The leader's fence: how long this replica may still act as the leader, and the check that
//! refuses its API requests after that.
//!
//! A standby takes the leader Lease once it has not been renewed for the Lease's duration. A
//! leader that cannot renew (the API server or etcd away, the process stopped) learns it lost
//! only when it can read the Lease again, and meanwhile its reconciles go on: measured in the
//! soak, the old leader finished a plan step and wrote a status after the new one had started
//! on the same object. So, as client-go's renew deadline does, a leader holds its authority
//! only for three quarters of the Lease's duration after it last saw its own renewal; the API
//! client refuses every request but the leader election's own past that moment (a process
//! stopped and continued is refused on its very first request), and the manager stops.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Until when this replica may act as the leader (`None`: no limit, without leader election).
#[derive(Clone, Debug)]
pub struct Fence(Arc<watch::Sender<Option<Instant>>>);

impl Default for Fence {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(None)))
    }
}

/// A request refused because the leader's authority ran out.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: this replica may no longer act as the leader (its Lease was last confirmed too long ago)"
)]
pub struct NotLeading;

impl Fence {
    /// A fence that holds nothing yet: every request is refused until [`Fence::until`].
    pub fn closed() -> Self {
        Self(Arc::new(watch::Sender::new(Some(Instant::now()))))
    }

    /// This replica may act until `until` (later calls move it either way).
    pub fn until(&self, until: Instant) {
        self.0.send_replace(Some(until));
    }

    /// Ends the authority now.
    pub fn close(&self) {
        self.until(Instant::now());
    }

    /// Whether this replica may act now.
    pub fn open(&self) -> bool {
        self.0.borrow().is_none_or(|until| Instant::now() < until)
    }

    /// Resolves once the authority ended (the deadline may move meanwhile).
    pub async fn ended(&self) {
        let mut changes = self.0.subscribe();
        loop {
            let until = *changes.borrow_and_update();
            match until {
                Some(until) if Instant::now() >= until => return,
                Some(until) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until.into()) => {}
                        _ = changes.changed() => {}
                    }
                }
                None => {
                    if changes.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}

/// How long after a renewal seen `age` ago the leader may still act: three quarters of the
/// Lease's `duration`, less that age (so that it stops a quarter of the duration before a
/// standby may take the Lease, which it does a whole duration after the renewal).
pub fn authority(duration: Duration, age: Duration) -> Duration {
    (duration * 3 / 4).saturating_sub(age)
}

/// Whether a request to `path` is the leader election's own (Leases), which the fence lets
/// through: without them the replica could never learn it leads again.
pub fn exempt(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_ends_before_a_standby_may_take_the_lease() {
        let d = Duration::from_secs(8);
        assert_eq!(authority(d, Duration::ZERO), Duration::from_secs(6));
        assert_eq!(authority(d, Duration::from_secs(1)), Duration::from_secs(5));
        assert_eq!(authority(d, Duration::from_secs(9)), Duration::ZERO);
    }

    #[test]
    fn a_fence_is_open_until_its_deadline_and_leases_pass_it() {
        assert!(Fence::default().open(), "no leader election: no limit");
        let fence = Fence::closed();
        assert!(!fence.open());
        fence.until(Instant::now() + Duration::from_secs(60));
        assert!(fence.open());
        fence.close();
        assert!(!fence.open());
        assert!(exempt(
            "/apis/coordination.k8s.io/v1/namespaces/tfops-system/leases/tfops-manager"
        ));
        assert!(!exempt(
            "/apis/infra.argocd.io/v1alpha1/namespaces/a/terraforms/w/status"
        ));
    }

    #[tokio::test]
    async fn ended_resolves_once_the_fence_is_closed_however_far_it_was() {
        let fence = Fence::closed();
        fence.until(Instant::now() + Duration::from_secs(3600));
        let waiting = tokio::spawn({
            let fence = fence.clone();
            async move { fence.ended().await }
        });
        fence.close();
        // Woken by the change: the hour is not waited out.
        tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .unwrap()
            .unwrap();
    }
}
