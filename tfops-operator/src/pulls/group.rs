//! One repository and token: its open pull requests, whose heads may be planned, and what to
//! plan and remove now.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tfops_core::api::{ForgeRepository, ObjectKey, TerraformObject};
use tfops_core::ports::PortError;
use tfops_core::pulls::{
    self, Forge, PlanAction, PlanRef, PullComment, PullRequest, Touched, Trust,
};

use super::{Open, Shared};
use crate::forge::GiteaForge;

/// The objects of one repository whose pull requests are read with one token.
pub struct Group {
    /// The repository ([`tfops_core::source::repository_id`]).
    pub id: String,
    /// Where its API is.
    pub repository: ForgeRepository,
    /// The token (never logged).
    token: String,
    /// Its objects.
    pub objects: Vec<TerraformObject>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("id", &self.id)
            .field("objects", &self.objects.len())
            .finish_non_exhaustive()
    }
}

impl Group {
    /// A group of no objects yet.
    pub fn new(id: String, repository: ForgeRepository, token: String) -> Self {
        Self {
            id,
            repository,
            token,
            objects: Vec::new(),
        }
    }

    /// The forge client of this group: the one made before for this repository and token
    /// (its connections and the token's login kept), or a new one.
    pub(crate) fn forge(&self, shared: &Shared) -> Result<Arc<GiteaForge>, PortError> {
        let key = (
            self.id.clone(),
            tfops_core::digest::sha256_hex(self.token.as_bytes()),
        );
        let mut forges = shared
            .forges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(forge) = forges.get(&key) {
            return Ok(forge.clone());
        }
        let forge = Arc::new(
            GiteaForge::new(self.repository.clone(), self.token.clone())?
                .counting(shared.metrics.forge_requests.clone()),
        );
        forges.insert(key, forge.clone());
        Ok(forge)
    }

    /// The object `key` of this group.
    pub(crate) fn object(&self, key: &ObjectKey) -> Option<&TerraformObject> {
        self.objects.iter().find(|o| &o.key() == key)
    }
}

/// The token `object`'s `spec.sourceRef.pullRequests.tokenSecretRef` names: from its
/// namespace, or from another whose Secret grants the object's namespace its use
/// ([`tfops_core::api::FORGE_TOKEN_NAMESPACES`]).
pub(crate) async fn token(
    client: &kube::Client,
    object: &TerraformObject,
) -> Result<String, PortError> {
    let Some(pulls) = &object.spec.source_ref.pull_requests else {
        return Err(PortError::Invalid("no spec.sourceRef.pullRequests".into()));
    };
    let reference = &pulls.token_secret_ref;
    let own = &object.metadata.namespace;
    let namespace = reference.namespace_for(own);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let where_ = format!(
        "spec.sourceRef.pullRequests.tokenSecretRef: Secret {namespace}/{} key {}",
        reference.name, reference.key
    );
    let secret = secrets
        .get_opt(&reference.name)
        .await
        .map_err(|e| tfops_kube::error::port_error(&where_, e))?
        .ok_or_else(|| PortError::NotFound(format!("{where_}: no such Secret")))?;
    token_of(&secret, reference, namespace, own, &where_)
}

/// The token `reference` names in `secret` (in `namespace`), for an object of namespace
/// `own`: refused unless the Secret is in `own` or its
/// [`tfops_core::api::FORGE_TOKEN_NAMESPACES`] annotation lists `own`; `where_` names it in
/// errors.
fn token_of(
    secret: &Secret,
    reference: &tfops_core::api::TokenSecretRef,
    namespace: &str,
    own: &str,
    where_: &str,
) -> Result<String, PortError> {
    let granted = secret
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(tfops_core::api::FORGE_TOKEN_NAMESPACES));
    if !tfops_core::api::token_granted(granted.map(String::as_str), namespace, own) {
        return Err(PortError::AccessDenied(format!(
            "{where_}: the Secret does not let objects of namespace {own} use it (list {own} in its annotation {})",
            tfops_core::api::FORGE_TOKEN_NAMESPACES
        )));
    }
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&reference.key))
        .ok_or_else(|| PortError::NotFound(format!("{where_}: no such key")))?;
    let token = String::from_utf8(value.0.clone())
        .map_err(|_| PortError::Invalid(format!("{where_}: not UTF-8")))?;
    Ok(token.trim().to_string())
}

/// Looks at the group's open pull requests: removes the plans no longer wanted, starts the
/// ones missing, and publishes each pull request's comment and statuses.
pub(crate) async fn look(shared: &Arc<Shared>, group: &Group) -> Result<(), PortError> {
    let forge = group.forge(shared)?;
    let open = open_pull_requests(&forge, group).await?;
    let keys: BTreeSet<ObjectKey> = group.objects.iter().map(TerraformObject::key).collect();
    let namespaces: BTreeSet<String> = keys.iter().map(|k| k.namespace.clone()).collect();
    let namespaces: Vec<String> = namespaces.into_iter().collect();
    // Running first, then stored: a plan that ends in between is stored before it stops
    // running, so it is seen in one or the other, never planned twice.
    let running = shared.tasks.running(&group.id);
    let (merged_plans, stored_plans): (Vec<_>, Vec<_>) = shared
        .store
        .list(&namespaces)
        .await?
        .into_iter()
        .filter(|p| p.repository == group.id && keys.contains(&p.plan_ref.key))
        .partition(super::approvals::is_merged);
    let stored: Vec<PlanRef> = stored_plans
        .iter()
        .map(|p| p.plan_ref.clone())
        .chain(running)
        .collect();
    let wanted: Vec<(PullRequest, Vec<Touched>, bool)> = open
        .iter()
        .map(|o| {
            let allowed = o
                .touched
                .iter()
                .filter(|(_, trust)| trust.allows())
                .map(|(t, _)| t.clone())
                .collect();
            (o.pull.clone(), allowed, true)
        })
        .collect();
    let mut closing =
        super::closing::Closing::new(shared, group, forge.as_ref(), &open, &stored_plans);
    for action in pulls::plans_to_make(&wanted, &stored) {
        tracing::debug!(?action, "a pull request's plan");
        match action {
            PlanAction::Remove(plan) => closing.remove(plan).await?,
            PlanAction::Make(plan) => {
                let Some(o) = open.iter().find(|o| o.pull.number == plan.number) else {
                    continue;
                };
                let Some(object) = group.object(&plan.key) else {
                    continue;
                };
                super::tasks::start(shared, group, object, &o.pull, plan);
            }
        }
    }
    closing.say_closed().await?;
    let mut teams = closing.teams;
    for o in &open {
        let approvals = super::approvals::record_open(
            shared,
            group,
            forge.as_ref(),
            o,
            &stored_plans,
            &mut teams,
        )
        .await?;
        super::publish::publish(shared, group, forge.as_ref(), o, &stored_plans, &approvals)
            .await?;
    }
    super::approvals::follow(shared, group, forge.as_ref(), &merged_plans).await?;
    Ok(())
}

/// The open pull requests with the objects each touches and whether each may be planned.
async fn open_pull_requests(forge: &GiteaForge, group: &Group) -> Result<Vec<Open>, PortError> {
    let mut writers: BTreeMap<String, bool> = BTreeMap::new();
    let mut out = Vec::new();
    for pull in forge.open_pull_requests().await? {
        let touched = pulls::touched(&pull, &group.repository, &group.objects);
        let mut comments: Option<Vec<PullComment>> = None;
        let mut judged = Vec::with_capacity(touched.len());
        for t in touched {
            let Some(object) = group.object(&t.key) else {
                continue;
            };
            let listed = object
                .spec
                .source_ref
                .pull_requests
                .as_ref()
                .map(|p| p.trusted_authors.clone())
                .unwrap_or_default();
            let mut first = trust_of(&pull, &listed, &writers, &[]);
            if !first.allows() {
                // Only now are comments and writers read (most pull requests are trusted).
                if comments.is_none() {
                    comments = Some(forge.comments(pull.number).await?);
                }
                let said = comments.as_deref().unwrap_or_default();
                if listed.is_empty() {
                    for login in std::iter::once(&pull.author).chain(said.iter().map(|c| &c.author))
                    {
                        if !writers.contains_key(login) {
                            let can = forge.can_write(login).await?;
                            writers.insert(login.clone(), can);
                        }
                    }
                }
                first = trust_of(&pull, &listed, &writers, said);
            }
            judged.push((t, first));
        }
        out.push(Open {
            pull,
            touched: judged,
        });
    }
    Ok(out)
}

fn trust_of(
    pull: &PullRequest,
    listed: &[String],
    writers: &BTreeMap<String, bool>,
    comments: &[PullComment],
) -> Trust {
    let writers: BTreeSet<String> = writers
        .iter()
        .filter(|(_, can)| **can)
        .map(|(l, _)| l.clone())
        .collect();
    pulls::trust(pull, listed, &writers, comments)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn secret(granted: Option<&str>) -> Secret {
        let mut s: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "forge", "namespace": "tfops-forge"},
            "data": {"token": "c2VjcmV0Cg=="},
        }))
        .unwrap();
        if let Some(g) = granted {
            s.metadata
                .annotations
                .get_or_insert_default()
                .insert(tfops_core::api::FORGE_TOKEN_NAMESPACES.into(), g.into());
        }
        s
    }

    #[test]
    fn a_token_elsewhere_is_read_only_for_the_namespaces_its_secret_grants() {
        let reference = tfops_core::api::TokenSecretRef {
            name: "forge".into(),
            key: "token".into(),
            namespace: Some("tfops-forge".into()),
        };
        let read = |granted, own| token_of(&secret(granted), &reference, "tfops-forge", own, "ref");
        // Another team's token, not granted to team-a: refused, and nothing of it given back.
        for granted in [None, Some("team-b"), Some("team-ab,team")] {
            let refused = read(granted, "team-a").unwrap_err();
            assert!(matches!(refused, PortError::AccessDenied(_)), "{refused:?}");
            assert!(!refused.to_string().contains("secret"), "{refused}");
            assert!(
                refused
                    .to_string()
                    .contains(tfops_core::api::FORGE_TOKEN_NAMESPACES)
            );
        }
        assert_eq!(read(Some("team-b, team-a"), "team-a").unwrap(), "secret");
        assert_eq!(read(Some("*"), "team-a").unwrap(), "secret");
        // In the object's own namespace, as before: no annotation needed.
        let own = token_of(&secret(None), &reference, "team-a", "team-a", "ref");
        assert_eq!(own.unwrap(), "secret");
    }
}
