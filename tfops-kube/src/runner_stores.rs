//! The stores a runner Pod writes with: the plan store, the outputs sink and the state
//! administration of this crate,
//! on a client with the Pod's own identity (its ServiceAccount), owner references naming the
//! object of the setup (the runner's identity cannot read `Terraform` objects to learn it).

use std::sync::Arc;

use tfops_core::ports::{OutputsSink, PlanStore, StateAdmin};
use tfops_runner::stores::{ObjectRef, Stores};

use crate::meta::{Owner, owner_reference};
use crate::{KubeOutputsSink, KubePlanStore, KubeStateAdmin};

/// [`Stores`] on the Kubernetes API.
#[derive(Clone)]
pub struct KubeRunnerStores {
    client: kube::Client,
}

impl std::fmt::Debug for KubeRunnerStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRunnerStores").finish_non_exhaustive()
    }
}

impl KubeRunnerStores {
    /// Stores writing with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    fn owner(object: &ObjectRef) -> Owner {
        if object.uid.is_empty() {
            Owner::None
        } else {
            Owner::Fixed(owner_reference(&object.key.name, &object.uid))
        }
    }
}

impl Stores for KubeRunnerStores {
    fn plans(&self, object: &ObjectRef) -> Arc<dyn PlanStore> {
        Arc::new(KubePlanStore::new(self.client.clone(), Self::owner(object)))
    }

    fn outputs(&self, object: &ObjectRef) -> Arc<dyn OutputsSink> {
        Arc::new(KubeOutputsSink::new(
            self.client.clone(),
            Self::owner(object),
        ))
    }

    fn state(&self, _object: &ObjectRef) -> Arc<dyn StateAdmin> {
        Arc::new(KubeStateAdmin::new(self.client.clone()))
    }
}
