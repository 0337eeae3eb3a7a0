//! A runner session on a runner Pod: the gRPC session, with every command raced against the
//! Pod's death (so a runner that dies is reported at once, with the container's reason and
//! message, instead of after the client's re-attach attempts or never), and cleanup that
//! deletes the Pod unless the object keeps it.

use std::collections::BTreeMap;
use std::future::Future;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use tfops_core::api::InventoryEntry;
use tfops_core::ports::{
    OutputValue, OutputsRequest, PlanRequest, PlanResult, PlanToStore, PortError, RunnerSession,
    SetupRequest, ShownPlan,
};
use tfops_runner::client::{Session, uses_tfops_backend};

use super::pod_state::death;
use crate::error::{is_not_found, port_error};

/// Watches one runner Pod (by name and uid).
#[derive(Clone)]
pub struct PodWatch {
    pods: Api<Pod>,
    namespace: String,
    name: String,
    uid: String,
}

impl PodWatch {
    /// Watches the Pod `name` of `pods` with `uid`.
    pub fn new(pods: Api<Pod>, namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            pods,
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
        }
    }

    fn died_because(&self, why: &str) -> PortError {
        PortError::Unavailable(format!("runner Pod {}/{} {why}", self.namespace, self.name))
    }

    /// Whether the Pod is gone or dead now, and why.
    pub async fn dead_now(&self) -> Option<PortError> {
        match self.pods.get_opt(&self.name).await {
            Ok(None) => Some(self.died_because("is gone")),
            Ok(Some(p)) if p.metadata.uid.as_deref() != Some(self.uid.as_str()) => {
                Some(self.died_because("was replaced by another Pod"))
            }
            Ok(Some(p)) => death(&p).map(|d| self.died_because(&format!("died: {d}"))),
            Err(_) => None,
        }
    }

    /// Resolves when the Pod dies, is deleted or replaced, with why.
    pub async fn died(&self) -> PortError {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.name));
        let mut events = watcher(self.pods.clone(), config)
            .backoff(crate::watch_backoff::watch_backoff())
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    if p.metadata.uid.as_deref() != Some(self.uid.as_str()) {
                        return self.died_because("was replaced by another Pod");
                    }
                    if let Some(d) = death(&p) {
                        return self.died_because(&format!("died: {d}"));
                    }
                }
                Ok(watcher::Event::Delete(_)) => return self.died_because("was deleted"),
                Ok(watcher::Event::Init | watcher::Event::InitDone) | Err(_) => {}
            }
        }
        self.died_because("could no longer be watched")
    }

    /// Watches the Pod in the background for as long as the returned [`Death`] lives: one
    /// watch for a whole session rather than one per command.
    pub fn watch_death(&self) -> Death {
        let (tell, seen) = tokio::sync::watch::channel(None);
        let me = self.clone();
        let task = tokio::spawn(async move {
            let why = me.died().await;
            let _ = tell.send(Some(why));
        });
        Death { seen, task }
    }
}

/// A runner Pod's death, as its background watch saw it (see [`PodWatch::watch_death`]).
pub struct Death {
    seen: tokio::sync::watch::Receiver<Option<PortError>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Death {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Death {
    /// Resolves when the Pod has died, with why; never when its watch was stopped.
    async fn happened(&self) -> PortError {
        let mut seen = self.seen.clone();
        if let Ok(why) = seen.wait_for(Option::is_some).await
            && let Some(why) = why.clone()
        {
            return why;
        }
        std::future::pending().await
    }
}

/// `command`, unless the Pod dies first; a command that fails while the Pod is dead reports
/// the death (the more useful of the two messages).
async fn guard<T>(
    pod: &PodWatch,
    death: &Death,
    command: impl Future<Output = Result<T, PortError>>,
) -> Result<T, PortError> {
    let result = tokio::select! {
        biased;
        r = command => r,
        d = death.happened() => return Err(d),
    };
    match result {
        Err(e) => Err(pod.dead_now().await.unwrap_or(e)),
        ok => ok,
    }
}

/// After a command: a runner given up (a command outlived its timeout and the controller's
/// margin with no answer) is frozen or cut off, and its Pod is removed so that nothing waits
/// on it again.
async fn after<T>(
    pod: &PodWatch,
    gave_up: bool,
    result: Result<T, PortError>,
) -> Result<T, PortError> {
    if gave_up
        && matches!(result, Err(PortError::TimedOut(_)))
        && let Err(e) = pod.delete().await
    {
        tracing::warn!(pod = %pod.name, error = %e, "removing a runner given up");
    }
    result
}

impl PodWatch {
    /// Deletes the Pod (only this one: a precondition on its uid).
    ///
    /// # Errors
    /// The API's error, but for "already gone".
    pub async fn delete(&self) -> Result<(), PortError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.pods.delete(&self.name, &params).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // A 409: the uid differs, so the Pod we ran in is gone already.
            Err(e) if crate::error::is_conflict(&e) => Ok(()),
            Err(e) => Err(port_error(
                &format!("deleting runner Pod {}/{}", self.namespace, self.name),
                e,
            )),
        }
    }
}

/// The session of one run on a runner Pod.
pub struct PodSession {
    inner: Session,
    pod: PodWatch,
    death: Death,
    delete_after: bool,
    identity: String,
    /// Reads the object's state to hand it over at setup (a pull request's runner).
    hand_from: Option<crate::state::KubeStateAdmin>,
}

impl PodSession {
    /// `inner` on the Pod `pod` watches; `delete_after`: delete the Pod at cleanup;
    /// `identity`: who the Pod acts as (its ServiceAccount's user name).
    pub fn new(inner: Session, pod: PodWatch, delete_after: bool, identity: String) -> Self {
        Self {
            inner,
            death: pod.watch_death(),
            pod,
            delete_after,
            identity,
            hand_from: None,
        }
    }

    /// The session hands the runner its object's state, read with `admin` (the controller's
    /// identity) at setup, in place of tfops' kubernetes backend: the runner Pod of a pull
    /// request's plan has no Kubernetes identity of its own.
    pub fn handing_state(mut self, admin: crate::state::KubeStateAdmin) -> Self {
        self.hand_from = Some(admin);
        self
    }
}

#[async_trait]
impl RunnerSession for PodSession {
    fn binary(&self) -> String {
        self.inner.binary()
    }

    fn runner(&self) -> String {
        self.inner.runner()
    }

    fn identity(&self) -> String {
        self.identity.clone()
    }

    fn output_tail(&self) -> String {
        self.inner.output_tail()
    }

    async fn setup(&mut self, request: &SetupRequest) -> Result<(), PortError> {
        let o = &request.object;
        if let Some(admin) = self.hand_from.as_ref().filter(|_| uses_tfops_backend(o)) {
            // (`spec.workspace` defaults to `default`, and validation refuses it empty.)
            let state = admin
                .stored_state(&o.key(), &o.spec.workspace, &o.state_secret_suffix())
                .await?;
            self.inner.hand_state(state);
        }
        let r = guard(&self.pod, &self.death, self.inner.setup(request)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn init(&mut self) -> Result<(), PortError> {
        let r = guard(&self.pod, &self.death, self.inner.init()).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn select_workspace(&mut self, workspace: &str) -> Result<(), PortError> {
        guard(
            &self.pod,
            &self.death,
            self.inner.select_workspace(workspace),
        )
        .await
    }

    async fn plan(&mut self, request: &PlanRequest) -> Result<PlanResult, PortError> {
        let r = guard(&self.pod, &self.death, self.inner.plan(request)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn show(&mut self) -> Result<ShownPlan, PortError> {
        let r = guard(&self.pod, &self.death, self.inner.show()).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn apply(&mut self, run_id: &str) -> Result<(), PortError> {
        let r = guard(&self.pod, &self.death, self.inner.apply(run_id)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn attach(&mut self, run_id: &str) -> Result<(), PortError> {
        let r = guard(&self.pod, &self.death, self.inner.attach(run_id)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn outputs(&mut self) -> Result<BTreeMap<String, OutputValue>, PortError> {
        let r = guard(&self.pod, &self.death, self.inner.outputs()).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn inventory(&mut self) -> Result<Vec<InventoryEntry>, PortError> {
        let r = guard(&self.pod, &self.death, self.inner.inventory()).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn force_unlock(&mut self, lock_id: &str) -> Result<(), PortError> {
        let r = guard(&self.pod, &self.death, self.inner.force_unlock(lock_id)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn cleanup(&mut self) -> Result<(), PortError> {
        let cleaned = guard(&self.pod, &self.death, self.inner.cleanup()).await;
        if self.delete_after {
            // The working directory dies with the Pod whatever the runner answered.
            return self.pod.delete().await;
        }
        cleaned
    }

    fn writes_for_object(&self) -> bool {
        self.inner.writes_for_object()
    }

    async fn save_plan(&mut self, plan: &PlanToStore) -> Result<(), PortError> {
        let r = guard(&self.pod, &self.death, self.inner.save_plan(plan)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn delete_plan(&mut self, workspace: &str) -> Result<(), PortError> {
        let r = guard(&self.pod, &self.death, self.inner.delete_plan(workspace)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn delete_outputs(&mut self, name: &str) -> Result<(), PortError> {
        let r = guard(&self.pod, &self.death, self.inner.delete_outputs(name)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }

    async fn delete_state(&mut self, workspace: &str, suffix: &str) -> Result<(), PortError> {
        guard(
            &self.pod,
            &self.death,
            self.inner.delete_state(workspace, suffix),
        )
        .await
    }

    async fn write_outputs(
        &mut self,
        request: &OutputsRequest,
    ) -> Result<BTreeMap<String, OutputValue>, PortError> {
        let r = guard(&self.pod, &self.death, self.inner.write_outputs(request)).await;
        after(&self.pod, self.inner.gave_up(), r).await
    }
}
