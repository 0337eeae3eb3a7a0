//! Leader election on a Lease (`kube-lease-manager`: server-side apply of the Lease, renewal
//! before expiry): only the leader reconciles; a standby takes over within the lease duration
//! once the leader stops renewing. The leader's authority is fenced ([`super::fence`]): a
//! guard reads the Lease and lets this replica act only three quarters of the duration past the
//! last renewal it saw of its own.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;

use super::fence::{Fence, authority};

/// Leadership: wait for it, learn when it is lost, and release it.
pub struct Leadership {
    leading: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
    fence: Fence,
    guard: Option<tokio::task::JoinHandle<()>>,
    lease: (kube::Api<Lease>, String, String, Duration),
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
        fence: Fence,
    ) -> anyhow::Result<Self> {
        let seconds = duration.as_secs().max(3);
        // Renew once a third of the lease has passed (kube-lease-manager's `grace` is how long
        // before the end it renews): the fence's authority, three quarters of the lease past a
        // renewal it saw, then always spans a renewal and the guard's look at it.
        let params = LeaseParams::new(identity, seconds, (seconds * 2 / 3).max(1));
        let leases = kube::Api::namespaced(client.clone(), namespace);
        let manager = lease_manager(client, namespace, name, params).await?;
        let (leading, task) = manager.watch().await;
        Ok(Self {
            leading,
            task,
            fence,
            guard: None,
            lease: (
                leases,
                name.to_string(),
                identity.to_string(),
                Duration::from_secs(seconds),
            ),
        })
    }

    /// Resolves once this replica leads; from then on its authority is fenced.
    pub async fn acquired(&mut self) {
        while !*self.leading.borrow_and_update() {
            if self.leading.changed().await.is_err() {
                // The election task ended: never leading.
                std::future::pending::<()>().await;
            }
        }
        let (leases, name, identity, duration) = self.lease.clone();
        self.fence
            .until(std::time::Instant::now() + authority(duration, Duration::ZERO));
        let fence = self.fence.clone();
        self.guard = Some(tokio::spawn(guard(leases, name, identity, duration, fence)));
    }

    /// Gives the Lease up (the election task frees it once nobody listens), so that a standby
    /// leads at once instead of after the lease duration; waits at most five seconds.
    pub async fn release(self) {
        if let Some(guard) = &self.guard {
            guard.abort();
        }
        drop(self.leading);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }

    /// Resolves when this replica stops leading: the election says so, or its authority
    /// ran out (the Lease not seen renewed in time).
    pub async fn lost(&mut self) {
        let fence = self.fence.clone();
        let said = async {
            while *self.leading.borrow_and_update() {
                if self.leading.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::select! {
            () = said => {}
            () = fence.ended() => {}
        }
    }
}

/// The election's manager of Lease `namespace/name`. The API server away (a replica started
/// during an outage) is waited out rather than a reason to exit, which would only bring the
/// replica back in a crash loop; so is a refusal for the first minute (a kube-apiserver just
/// started refuses until its RBAC caches are filled: seen in the soak). A refusal that lasts
/// is the user's to mend, and said.
async fn lease_manager(
    client: kube::Client,
    namespace: &str,
    name: &str,
    params: LeaseParams,
) -> anyhow::Result<kube_lease_manager::LeaseManager> {
    let began = std::time::Instant::now();
    let mut wait = Duration::from_secs(1);
    loop {
        let built = LeaseManagerBuilder::new(client.clone(), name)
            .with_namespace(namespace)
            .with_parameters(params.clone())
            .build()
            .await;
        let error = match built {
            Ok(manager) => return Ok(manager),
            Err(kube_lease_manager::LeaseManagerError::KubeError(error)) => error,
            Err(other) => return Err(other.into()),
        };
        let refused = matches!(&error, kube::Error::Api(s) if s.code < 500);
        if refused && began.elapsed() > Duration::from_secs(60) {
            return Err(anyhow::Error::new(error).context(format!(
                "joining the leader election on Lease {namespace}/{name}"
            )));
        }
        tracing::warn!(%error, lease = %format!("{namespace}/{name}"), "cannot join the leader election yet; trying again");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(10));
    }
}

/// Reads the Lease every sixth of its duration. Each renewal it sees of this replica's (the
/// renew time moved on) extends the authority to three quarters of the duration past that
/// renewal; a Lease naming another ends it. A renewal not seen (a read that fails, a renew
/// time that stays) extends nothing: the authority runs out on its own. (The first renew time
/// read is only a baseline: it may be an earlier process's, of the same identity.)
async fn guard(
    leases: kube::Api<Lease>,
    name: String,
    me: String,
    duration: Duration,
    fence: Fence,
) {
    let every = (duration / 6).max(Duration::from_millis(500));
    let mut last: Option<jiff::Timestamp> = None;
    loop {
        if let Ok(Some(lease)) = leases.get_opt(&name).await {
            let spec = lease.spec.unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(me.as_str()) {
                fence.close();
            } else if let Some(renewed) = spec.renew_time.map(|t| t.0) {
                if last.is_some_and(|l| renewed > l) {
                    let age = jiff::Timestamp::now()
                        .duration_since(renewed)
                        .try_into()
                        .unwrap_or(Duration::ZERO);
                    fence.until(std::time::Instant::now() + authority(duration, age));
                }
                last = Some(renewed);
            }
        }
        tokio::time::sleep(every).await;
    }
}
