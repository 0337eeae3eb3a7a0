//! What people ask of `Terraform` objects in a cluster: approve, re-plan, reconcile now,
//! suspend, resume and force-unlock, each the same edit of the object an Argo CD resource
//! action makes ([`tfops_core::api::annotations`]), and the reads that go with them (the
//! objects, the readable plan). Used by the `tfops` CLI; any program can make the same edits.
//!
//! Every edit is a merge patch carrying the `resourceVersion` it was decided on, so an edit
//! based on a status that changed meanwhile (a new plan became pending) is refused by the API
//! server with a conflict and decided again on a fresh read.

use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tfops_core::api::{ObjectKey, annotations};

use crate::resource::{PLURAL, Terraform};

/// How often an edit is decided again after a conflict.
const ATTEMPTS: usize = 5;

/// Why an action could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The object does not exist.
    #[error("no Terraform object {0}")]
    NotFound(ObjectKey),
    /// The API server does not serve `Terraform` objects.
    #[error(
        "the API server does not serve {PLURAL}.{group}: the CRD is not installed (kubectl apply -k config/crd, or the Helm chart)",
        group = tfops_core::api::GROUP
    )]
    CrdMissing,
    /// RBAC refused the request.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Nothing is waiting for approval.
    #[error("{0} has no plan waiting for approval")]
    NoPendingPlan(ObjectKey),
    /// The pending plan is already approved and being applied: approving again would approve
    /// nothing (the next plan with changes is a new pending plan, approved anew).
    #[error(
        "plan {plan} of {object} is already approved and being applied: nothing to approve (watch it with tfops get {name})",
        name = object.name
    )]
    Applying {
        /// The object.
        object: ObjectKey,
        /// The plan being applied.
        plan: String,
    },
    /// The plan id given is not the pending one.
    #[error(
        "plan {given} is not the pending plan of {object} (pending: {pending}); review the pending plan and approve it by its id"
    )]
    StalePlan {
        /// The object.
        object: ObjectKey,
        /// The id given.
        given: String,
        /// The pending id.
        pending: String,
    },
    /// No run has met a held state lock.
    #[error("{0} records no held state lock (status.lock.pending is empty)")]
    NoLock(ObjectKey),
    /// The lock id given is not the one the status records.
    #[error("lock {given} is not the lock {object} records (status.lock.pending: {pending})")]
    OtherLock {
        /// The object.
        object: ObjectKey,
        /// The id given.
        given: String,
        /// The recorded id.
        pending: String,
    },
    /// The object kept changing under the edit.
    #[error("{0} kept changing while it was edited ({ATTEMPTS} attempts)")]
    Contended(ObjectKey),
    /// Another failure of the API.
    #[error("{doing}: {source}")]
    Api {
        /// What was being done.
        doing: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// Watching or streaming broke off.
    #[error("{0}")]
    Watch(String),
    /// A stored plan could not be read.
    #[error(transparent)]
    Plan(#[from] tfops_core::ports::PortError),
}

/// One of the requests that need no check beyond the object existing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// A run now ([`annotations::RECONCILE`]).
    Reconcile,
    /// A fresh plan even when nothing changed ([`annotations::REPLAN`]).
    Replan,
    /// The [`annotations::SUSPEND`] annotation (as the Argo CD suspend action sets it): no
    /// runs until resumed, and Git's `spec` stays as it is.
    Suspend,
    /// The [`annotations::SUSPEND`] annotation removed and `spec.suspend: false` (as the Argo CD
    /// resume action does).
    Resume,
    /// The run under way stopped ([`annotations::CANCEL`], naming who asks as the API server
    /// knows them).
    Cancel,
}

/// What [`Actions::approve`] approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    /// The plan id.
    pub plan_id: String,
    /// The value written to [`annotations::APPROVE`].
    pub value: String,
}

/// The state lock [`Actions::force_unlock`] asked to release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlocking {
    /// The lock id.
    pub id: String,
    /// Who holds it, as the status records (`who`, operation, since).
    pub holder: String,
}

/// The actions, with the caller's own client (and so its own RBAC).
#[derive(Clone)]
pub struct Actions {
    client: kube::Client,
}

impl std::fmt::Debug for Actions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Actions").finish_non_exhaustive()
    }
}

/// A token that is new at each call (the time, as Argo CD's actions write it).
fn token() -> String {
    jiff::Timestamp::now().to_string()
}

impl Actions {
    /// Actions taken with `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The plans of pull requests stored for the object `key` (every pull request).
    ///
    /// # Errors
    /// RBAC, or the API's.
    pub async fn pull_request_plans(
        &self,
        key: &ObjectKey,
    ) -> Result<Vec<crate::pull_plans::StoredPullPlan>, ActionError> {
        crate::pull_plans::PullPlans::new(self.client.clone())
            .of_object(key)
            .await
            .map_err(ActionError::Plan)
    }

    /// The error for a failed call about something other than the object: RBAC, or the API's.
    pub(crate) fn failed(&self, doing: String, e: kube::Error) -> ActionError {
        match &e {
            kube::Error::Api(s) if s.code == 403 => ActionError::Forbidden(s.message.clone()),
            _ => ActionError::Api { doing, source: e },
        }
    }

    fn api(&self, namespace: &str) -> Api<Terraform> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The error for a failed call: a missing CRD, RBAC, or the API's own.
    async fn classify(
        &self,
        doing: String,
        key: Option<&ObjectKey>,
        e: kube::Error,
    ) -> ActionError {
        match &e {
            kube::Error::Api(s) if s.code == 403 => ActionError::Forbidden(s.message.clone()),
            kube::Error::Api(s) if s.code == 404 => {
                let group = format!("{}/{}", tfops_core::api::GROUP, tfops_core::api::VERSION);
                match self.client.list_api_group_resources(&group).await {
                    Ok(list) if list.resources.iter().any(|r| r.name == PLURAL) => match key {
                        Some(k) => ActionError::NotFound(k.clone()),
                        None => ActionError::Api { doing, source: e },
                    },
                    Ok(_) => ActionError::CrdMissing,
                    Err(kube::Error::Api(s)) if s.code == 404 => ActionError::CrdMissing,
                    Err(_) => match key {
                        Some(k) => ActionError::NotFound(k.clone()),
                        None => ActionError::Api { doing, source: e },
                    },
                }
            }
            _ => ActionError::Api { doing, source: e },
        }
    }

    /// One object.
    ///
    /// # Errors
    /// [`ActionError::NotFound`], [`ActionError::CrdMissing`], [`ActionError::Forbidden`].
    pub async fn get(&self, key: &ObjectKey) -> Result<Terraform, ActionError> {
        match self.api(&key.namespace).get(&key.name).await {
            Ok(t) => Ok(t),
            Err(e) => Err(self.classify(format!("reading {key}"), Some(key), e).await),
        }
    }

    /// The objects of `namespace` (every namespace when `None`), by namespace and name.
    ///
    /// # Errors
    /// [`ActionError::CrdMissing`], [`ActionError::Forbidden`].
    pub async fn list(&self, namespace: Option<&str>) -> Result<Vec<Terraform>, ActionError> {
        let api: Api<Terraform> = match namespace {
            Some(ns) => self.api(ns),
            None => Api::all(self.client.clone()),
        };
        let mut items = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                let doing = format!(
                    "listing {PLURAL} in {}",
                    namespace.unwrap_or("all namespaces")
                );
                return Err(self.classify(doing, None, e).await);
            }
        };
        items.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(items)
    }

    /// Decides an edit on a fresh read and patches it with that read's `resourceVersion`,
    /// again on a conflict. `decide` returns the merge patch (without the version) and what
    /// to report.
    async fn edit<T>(
        &self,
        key: &ObjectKey,
        what: &str,
        decide: impl Fn(&Terraform) -> Result<(Value, T), ActionError>,
    ) -> Result<T, ActionError> {
        for _ in 0..ATTEMPTS {
            let object = self.get(key).await?;
            let (mut patch, result) = decide(&object)?;
            patch["metadata"]["resourceVersion"] = json!(object.metadata.resource_version);
            let params = PatchParams::default();
            match self
                .api(&key.namespace)
                .patch(&key.name, &params, &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(result),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(self.classify(format!("{what} {key}"), Some(key), e).await),
            }
        }
        Err(ActionError::Contended(key.clone()))
    }

    /// Approves the pending plan (`plan_id`, when given, must be it) and asks for a run now.
    /// The approval counts only for that plan: when the plan re-made before applying would
    /// do something else, it becomes the new pending plan instead.
    ///
    /// # Errors
    /// [`ActionError::NoPendingPlan`], [`ActionError::StalePlan`], [`ActionError::Applying`],
    /// and those of [`Self::get`].
    pub async fn approve(
        &self,
        key: &ObjectKey,
        plan_id: Option<&str>,
    ) -> Result<Approved, ActionError> {
        self.edit(key, "approving the plan of", |object| {
            let status = object.status.clone().unwrap_or_default();
            if let Some(plan) = status.applying() {
                return Err(ActionError::Applying {
                    object: key.clone(),
                    plan: plan.to_string(),
                });
            }
            let pending = status.plan.pending;
            if pending.is_empty() {
                return Err(ActionError::NoPendingPlan(key.clone()));
            }
            if let Some(given) = plan_id
                && given != pending
            {
                return Err(ActionError::StalePlan {
                    object: key.clone(),
                    given: given.to_string(),
                    pending,
                });
            }
            let now = token();
            let value = format!("{pending}@{now}");
            let patch = json!({"metadata": {"annotations": {
                annotations::APPROVE: value,
                annotations::RECONCILE: now,
            }}});
            Ok((
                patch,
                Approved {
                    plan_id: pending,
                    value,
                },
            ))
        })
        .await
    }

    /// Makes `request`'s edit.
    ///
    /// # Errors
    /// Those of [`Self::get`].
    pub async fn request(&self, key: &ObjectKey, request: Request) -> Result<(), ActionError> {
        let patch = match request {
            Request::Reconcile => {
                json!({"metadata": {"annotations": {annotations::RECONCILE: token()}}})
            }
            Request::Replan => {
                let now = token();
                json!({"metadata": {"annotations": {annotations::REPLAN: now, annotations::RECONCILE: now}}})
            }
            Request::Suspend => json!({"metadata": {"annotations": {
                annotations::SUSPEND: format!("suspended with tfops suspend at {}", token()),
            }}}),
            Request::Resume => json!({
                "metadata": {"annotations": {annotations::SUSPEND: null}},
                "spec": {"suspend": false},
            }),
            Request::Cancel => json!({"metadata": {"annotations": {
                annotations::CANCEL: format!("{}@{}", self.who_am_i().await, token()),
            }}}),
        };
        self.edit(key, "editing", |_| Ok((patch.clone(), ()))).await
    }

    /// Who this client is, as the API server knows it (a SelfSubjectReview), or `tfops cancel`
    /// when it cannot tell.
    async fn who_am_i(&self) -> String {
        use k8s_openapi::api::authentication::v1::SelfSubjectReview;
        let reviews: kube::Api<SelfSubjectReview> = kube::Api::all(self.client.clone());
        reviews
            .create(
                &kube::api::PostParams::default(),
                &SelfSubjectReview::default(),
            )
            .await
            .ok()
            .and_then(|r| r.status?.user_info?.username)
            .filter(|u| !u.is_empty() && !u.contains('@'))
            .unwrap_or_else(|| "tfops cancel".into())
    }

    /// Asks for the state lock the status records (`lock_id`, when given, must be it) to be
    /// released on a run started now. Returns the lock and its holder, for the caller to show.
    ///
    /// # Errors
    /// [`ActionError::NoLock`], [`ActionError::OtherLock`], and those of [`Self::get`].
    pub async fn force_unlock(
        &self,
        key: &ObjectKey,
        lock_id: Option<&str>,
    ) -> Result<Unlocking, ActionError> {
        self.edit(key, "asking to unlock", |object| {
            let lock = object
                .status
                .as_ref()
                .map(|s| s.lock.clone())
                .unwrap_or_default();
            if lock.pending.is_empty() {
                return Err(ActionError::NoLock(key.clone()));
            }
            if let Some(given) = lock_id
                && given != lock.pending
            {
                return Err(ActionError::OtherLock {
                    object: key.clone(),
                    given: given.to_string(),
                    pending: lock.pending,
                });
            }
            let patch = json!({"metadata": {"annotations": {
                annotations::FORCE_UNLOCK: lock.pending,
                annotations::RECONCILE: token(),
            }}});
            Ok((
                patch,
                Unlocking {
                    id: lock.pending.clone(),
                    holder: lock.holder.clone(),
                },
            ))
        })
        .await
    }

    /// The object's last runs, newest first ([`crate::history`]).
    ///
    /// # Errors
    /// Those of [`Self::get`]; the history's.
    pub async fn history(
        &self,
        key: &ObjectKey,
    ) -> Result<Vec<tfops_core::history::RunEntry>, ActionError> {
        self.get(key).await?;
        Ok(crate::history::KubeRunHistory::new(self.client.clone())
            .read(key)
            .await?)
    }

    /// The pending plan as Terraform shows it, from the plan's ConfigMaps (no Secret read).
    ///
    /// # Errors
    /// [`ActionError::NoPendingPlan`] when nothing is pending or what is stored is another
    /// plan; those of [`Self::get`]; the store's.
    pub async fn readable_plan(&self, key: &ObjectKey) -> Result<(String, String), ActionError> {
        let object = self.get(key).await?;
        let status = object.status.unwrap_or_default();
        if status.plan.pending.is_empty() {
            return Err(ActionError::NoPendingPlan(key.clone()));
        }
        let workspace = status
            .stored_plan_workspace
            .unwrap_or(object.spec.workspace);
        let store = crate::plans::KubePlanStore::new(self.client.clone(), crate::meta::Owner::None);
        match store.readable(key, &workspace).await? {
            Some((id, text)) if id == status.plan.pending => Ok((id, text)),
            _ => Err(ActionError::NoPendingPlan(key.clone())),
        }
    }
}

#[cfg(test)]
mod tests;
