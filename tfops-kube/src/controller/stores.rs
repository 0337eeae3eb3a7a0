//! The controller's caches of `Terraform` objects, shared with other loops of the process
//! (the pull-request planner reads them instead of listing).

use std::sync::Arc;
use std::time::Duration;

use kube_runtime::reflector::Store;

use crate::Terraform;

/// The controller's caches of `Terraform` objects, set once it runs.
#[derive(Clone, Default)]
pub struct SharedStores(
    Arc<(
        std::sync::OnceLock<Vec<Store<Terraform>>>,
        tokio::sync::Notify,
    )>,
    Arc<std::sync::OnceLock<Wakers>>,
);

impl std::fmt::Debug for SharedStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStores")
            .field("set", &self.0.0.get().is_some())
            .finish()
    }
}

/// Where the controller takes requests to reconcile an object now, one sender per watched
/// scope (in the order of the stores).
type Wakers = Vec<futures::channel::mpsc::UnboundedSender<Terraform>>;

impl SharedStores {
    /// Shares the senders that make the controller reconcile an object of a scope now.
    pub(super) fn set_wakers(&self, wakers: Wakers) {
        let _ = self.1.set(wakers);
    }

    /// Asks the controller to reconcile the object `key` now (an approval of its plan was
    /// recorded on a merged pull request); nothing when it is not in the caches.
    pub fn wake(&self, key: &tfops_core::api::ObjectKey) {
        let (Some(stores), Some(wakers)) = (self.0.0.get(), self.1.get()) else {
            return;
        };
        let reference = kube_runtime::reflector::ObjectRef::new(&key.name).within(&key.namespace);
        for (store, waker) in stores.iter().zip(wakers) {
            if let Some(object) = store.get(&reference) {
                let _ = waker.unbounded_send((*object).clone());
                return;
            }
        }
    }

    /// Shares `stores` (the first run's, when the controller runs twice in one process),
    /// and gives them back.
    pub(super) fn set(&self, stores: Vec<Store<Terraform>>) -> Vec<Store<Terraform>> {
        let (set, notify) = &*self.0;
        let _ = set.set(stores.clone());
        notify.notify_waiters();
        stores
    }

    /// The caches, once the controller runs and each has been filled by its first list.
    pub async fn ready(&self) -> Vec<Store<Terraform>> {
        let (set, notify) = &*self.0;
        let stores = loop {
            let notified = notify.notified();
            tokio::pin!(notified);
            // Registered before looking, so that a set in between is not missed.
            notified.as_mut().enable();
            if let Some(stores) = set.get() {
                break stores.clone();
            }
            notified.await;
        };
        for store in &stores {
            // A store's readiness wakes one waiter only (kube-runtime keeps one waker), and the
            // controller waits on it too: looked at again each second rather than waited on
            // once. An error means the writer is gone (the controller stopped): the cache is
            // what there is.
            while let Err(_elapsed) =
                tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready()).await
            {
            }
        }
        stores
    }
}
