//! Leader election on a Lease (`kube-lease-manager`: server-side apply of the Lease, renewal
//! before expiry): only the leader reconciles; a standby takes over within the lease duration
//! once the leader stops renewing.

use std::time::Duration;

use anyhow::Context;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;

/// Leadership: wait for it, learn when it is lost, and release it.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
}

impl Leadership {
    /// Joins the election for Lease `namespace/name` as `identity`.
    ///
    /// # Errors
    /// When the Lease cannot be read or created.
    pub async fn join(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> anyhow::Result<Self> {
        let seconds = duration.as_secs().max(3);
        // Renew a third of the lease before it ends: room for clock skew and a slow API.
        let params = LeaseParams::new(identity, seconds, (seconds / 3).max(1));
        let manager = LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_parameters(params)
            .build()
            .await
            .with_context(|| format!("joining the leader election on Lease {namespace}/{name}"))?;
        let (leading, task) = manager.watch().await;
        Ok(Self { leading, task })
    }

    /// Resolves once this replica leads.
    pub async fn acquired(&mut self) {
        while !*self.leading.borrow_and_update() {
            if self.leading.changed().await.is_err() {
                // The election task ended: never leading.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Gives the Lease up (the election task frees it once nobody listens), so that a standby
    /// leads at once instead of after the lease duration; waits at most five seconds.
    pub async fn release(self) {
        drop(self.leading);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }

    /// Resolves when this replica stops leading.
    pub async fn lost(&mut self) {
        while *self.leading.borrow_and_update() {
            if self.leading.changed().await.is_err() {
                return;
            }
        }
    }
}
