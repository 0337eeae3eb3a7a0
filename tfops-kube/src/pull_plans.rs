//! The plans of pull requests, stored apart from the object's own plans: one ConfigMap per
//! object and pull request (`tfops-pr-<name>-<number>`, owned by the object), labelled with
//! the pull request and annotated with the head it was made at. It holds what the comment
//! shows (the outcome and Terraform's readable text, sensitive values masked by Terraform as
//! in the object's readable plans) and the content digest; never the plan's JSON or binary,
//! which may hold sensitive values and are never applied.
//!
//! Kept in the cluster so that a restarted manager, `tfops pr` and the Argo CD tab read the
//! same plans, and removed when the pull request closes (or the object goes).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams};
use tfops_core::api::{ObjectKey, TerraformObject};
use tfops_core::ports::PortError;
use tfops_core::pulls::{ObjectPlan, Outcome, PlanRef, PullApproval};

use crate::error::port_error;
use crate::meta::{LABEL_OBJECT, apply_params, base_labels, owner_reference};

/// The pull request's number, on each of its plans.
pub const LABEL_PULL_REQUEST: &str = "infra.argocd.io/pull-request";
/// The head commit the plan was made at.
pub const ANNOTATION_HEAD: &str = "infra.argocd.io/head-sha";
/// The repository ([`tfops_core::source::repository_id`]) of the pull request.
pub const ANNOTATION_REPOSITORY: &str = "infra.argocd.io/repository";
/// The object's whole name (the label may be shortened).
pub const ANNOTATION_OBJECT: &str = "infra.argocd.io/object-name";

/// The merge commit, once the pull request was merged with approvals of this plan (the
/// ConfigMap is then kept until what came of them is reported).
pub const ANNOTATION_MERGED: &str = "infra.argocd.io/merged-sha";
/// What was last reported on the merged pull request about this object.
pub const ANNOTATION_REPORTED: &str = "infra.argocd.io/reported";
/// The manager's signature of a merged record ([`crate::approval_key`]).
pub const ANNOTATION_SIGNATURE: &str = "infra.argocd.io/approval-signature";

const KEY_OUTCOME: &str = "outcome.json";
const KEY_APPROVAL: &str = "approval.json";
const KEY_TEXT: &str = "plan.txt";
const KEY_DIGEST: &str = "digest";

/// The longest plan text kept (a ConfigMap holds at most 1 MiB in all).
const TEXT_MAX: usize = 512 * 1024;

/// A pull request's plan of one object, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPullPlan {
    /// Which object, pull request and head.
    pub plan_ref: PlanRef,
    /// The repository it is a pull request of ([`tfops_core::source::repository_id`]).
    pub repository: String,
    /// What came of it (its text included).
    pub plan: ObjectPlan,
    /// Its content digest; empty when it failed or changes nothing.
    pub digest: String,
    /// The manager's signature of the merged record (empty before the merge).
    pub signature: String,
    /// The approvals recorded for this plan (of its head and content only).
    pub approval: Option<PullApproval>,
    /// The merge commit, when the pull request was merged with approvals of this plan.
    pub merged: Option<String>,
    /// What was last reported on the merged pull request about this object.
    pub reported: String,
}

/// The name of the ConfigMap of `object`'s plan of pull request `number`.
pub fn pull_plan_name(object: &str, number: u64) -> String {
    tfops_core::naming::shorten(
        &format!("tfops-pr-{object}-{number}"),
        tfops_core::naming::MAX_NAME,
    )
}

/// The plans of pull requests on the Kubernetes API.
#[derive(Clone)]
pub struct PullPlans {
    client: kube::Client,
    /// Signs and checks merged records; without it none is kept or counts.
    key: Option<crate::approval_key::ApprovalKey>,
}

impl PullPlans {
    /// The store on `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client, key: None }
    }

    /// This store, signing and checking merged records with `key`.
    pub fn with_key(mut self, key: crate::approval_key::ApprovalKey) -> Self {
        self.key = Some(key);
        self
    }

    /// Stores `plan` of `object` for pull request `number` of `repository` at `head_sha`,
    /// replacing what was stored for that pull request.
    ///
    /// # Errors
    /// The API's error.
    pub async fn save(
        &self,
        object: &TerraformObject,
        repository: &str,
        number: u64,
        head_sha: &str,
        plan: &ObjectPlan,
        digest: &str,
    ) -> Result<(), PortError> {
        let key = object.key();
        let name = pull_plan_name(&key.name, number);
        let mut labels = base_labels(&key);
        labels.insert(LABEL_PULL_REQUEST.into(), number.to_string());
        let annotations = BTreeMap::from([
            (ANNOTATION_HEAD.to_string(), head_sha.to_string()),
            (ANNOTATION_REPOSITORY.to_string(), repository.to_string()),
            (ANNOTATION_OBJECT.to_string(), key.name.clone()),
        ]);
        let (outcome, text) = split_text(&plan.outcome);
        let data = BTreeMap::from([
            (
                KEY_OUTCOME.to_string(),
                serde_json::to_string(&outcome).map_err(|e| PortError::Invalid(e.to_string()))?,
            ),
            (KEY_TEXT.to_string(), cut(&text, TEXT_MAX)),
            (KEY_DIGEST.to_string(), digest.to_string()),
        ]);
        let uid = &object.metadata.uid;
        let owners = (!uid.is_empty()).then(|| vec![owner_reference(&key.name, uid)]);
        let map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(key.namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations),
                owner_references: owners,
                ..ObjectMeta::default()
            },
            data: Some(data),
            ..ConfigMap::default()
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.namespace);
        api.patch(&name, &apply_params(), &kube::api::Patch::Apply(&map))
            .await
            .map(drop)
            .map_err(|e| port_error(&format!("storing {}/{name}", key.namespace), e))
    }

    /// Every stored plan of a pull request in `namespaces` (every namespace when empty).
    ///
    /// # Errors
    /// The API's error.
    pub async fn list(&self, namespaces: &[String]) -> Result<Vec<StoredPullPlan>, PortError> {
        let params = ListParams::default().labels(LABEL_PULL_REQUEST);
        let apis: Vec<Api<ConfigMap>> = if namespaces.is_empty() {
            vec![Api::all(self.client.clone())]
        } else {
            namespaces
                .iter()
                .map(|n| Api::namespaced(self.client.clone(), n))
                .collect()
        };
        let mut out = Vec::new();
        for api in apis {
            let listed = api
                .list(&params)
                .await
                .map_err(|e| port_error("listing the plans of pull requests", e))?;
            out.extend(listed.items.iter().filter_map(read));
        }
        out.sort_by(|a, b| a.plan_ref.cmp(&b.plan_ref));
        Ok(out)
    }

    /// The stored plans of the object `key`, every pull request.
    ///
    /// # Errors
    /// The API's error.
    pub async fn of_object(&self, key: &ObjectKey) -> Result<Vec<StoredPullPlan>, PortError> {
        let plans = self.list(std::slice::from_ref(&key.namespace)).await?;
        Ok(plans
            .into_iter()
            .filter(|p| &p.plan_ref.key == key)
            .collect())
    }

    /// Records `approval` (or none) on `key`'s plan of pull request `number`.
    ///
    /// # Errors
    /// The API's error.
    pub async fn set_approval(
        &self,
        key: &ObjectKey,
        number: u64,
        approval: Option<&PullApproval>,
    ) -> Result<(), PortError> {
        let value = match approval {
            Some(a) => serde_json::Value::String(
                serde_json::to_string(a).map_err(|e| PortError::Invalid(e.to_string()))?,
            ),
            None => serde_json::Value::Null,
        };
        self.merge_patch(
            key,
            number,
            serde_json::json!({"data": {KEY_APPROVAL: value}}),
        )
        .await
    }

    /// Keeps `key`'s plan of pull request `number`, merged at `merge_sha`, with `approval`,
    /// signed: the record the reconciler reads.
    ///
    /// # Errors
    /// Without a key ([`PullPlans::with_key`]); the API's error.
    pub async fn keep_merged(
        &self,
        key: &ObjectKey,
        number: u64,
        approval: &PullApproval,
        merge_sha: &str,
    ) -> Result<(), PortError> {
        let signer = self.key.as_ref().ok_or_else(|| {
            PortError::Invalid("no key to sign approvals of pull requests with".into())
        })?;
        let signature = signer.sign(&key.namespace, &key.name, approval, merge_sha);
        let record =
            serde_json::to_string(approval).map_err(|e| PortError::Invalid(e.to_string()))?;
        let patch = serde_json::json!({
            "metadata": {"annotations": {ANNOTATION_MERGED: merge_sha, ANNOTATION_SIGNATURE: signature}},
            "data": {KEY_APPROVAL: record},
        });
        self.merge_patch(key, number, patch).await
    }

    /// Records what was reported on the merged pull request about `key`.
    ///
    /// # Errors
    /// The API's error.
    pub async fn mark_reported(
        &self,
        key: &ObjectKey,
        number: u64,
        reported: &str,
    ) -> Result<(), PortError> {
        let patch =
            serde_json::json!({"metadata": {"annotations": {ANNOTATION_REPORTED: reported}}});
        self.merge_patch(key, number, patch).await
    }

    async fn merge_patch(
        &self,
        key: &ObjectKey,
        number: u64,
        patch: serde_json::Value,
    ) -> Result<(), PortError> {
        let name = pull_plan_name(&key.name, number);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.namespace);
        api.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(|e| port_error(&format!("updating {}/{name}", key.namespace), e))
    }

    /// The approvals recorded on `key`'s merged pull requests that carry the manager's
    /// signature (what the reconciler reads); none without a key. A record that does not
    /// verify (written by anyone else) is left out, with a warning.
    ///
    /// # Errors
    /// The API's error.
    pub async fn merged_approvals(&self, key: &ObjectKey) -> Result<Vec<PullApproval>, PortError> {
        let Some(checker) = &self.key else {
            return Ok(Vec::new());
        };
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.namespace);
        let params = ListParams::default().labels(&format!(
            "{LABEL_PULL_REQUEST},{LABEL_OBJECT}={}",
            tfops_core::naming::shorten(&key.name, tfops_core::naming::MAX_LABEL)
        ));
        let listed = api
            .list(&params)
            .await
            .map_err(|e| port_error("listing the plans of pull requests", e))?;
        Ok(listed
            .items
            .iter()
            .filter_map(read)
            .filter(|p| p.plan_ref.key == *key)
            .filter_map(|p| {
                let (merged, approval) = (p.merged.as_ref()?, p.approval.as_ref()?);
                if checker.verify(&key.namespace, &key.name, approval, merged, &p.signature) {
                    Some(approval.clone())
                } else {
                    tracing::warn!(object = %key, pull_request = p.plan_ref.number,
                        "an approval record of a merged pull request without the manager's signature: ignored");
                    None
                }
            })
            .collect())
    }

    /// Removes `key`'s plan of pull request `number`; none stored is success.
    ///
    /// # Errors
    /// The API's error.
    pub async fn delete(&self, key: &ObjectKey, number: u64) -> Result<(), PortError> {
        let name = pull_plan_name(&key.name, number);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &key.namespace);
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(port_error(&format!("removing {}/{name}", key.namespace), e)),
        }
    }
}

/// A stored plan read back; `None` for a ConfigMap that is not one whole (written by hand).
fn read(map: &ConfigMap) -> Option<StoredPullPlan> {
    let meta = &map.metadata;
    let annotation = |k: &str| meta.annotations.as_ref()?.get(k).cloned();
    let label = |k: &str| meta.labels.as_ref()?.get(k).cloned();
    let data = map.data.as_ref()?;
    let number: u64 = label(LABEL_PULL_REQUEST)?.parse().ok()?;
    let name = annotation(ANNOTATION_OBJECT).or_else(|| label(LABEL_OBJECT))?;
    let mut outcome: Outcome = serde_json::from_str(data.get(KEY_OUTCOME)?).ok()?;
    if let Outcome::Planned { text, .. } = &mut outcome {
        *text = data.get(KEY_TEXT).cloned().unwrap_or_default();
    }
    let key = ObjectKey {
        namespace: meta.namespace.clone()?,
        name,
    };
    Some(StoredPullPlan {
        plan_ref: PlanRef {
            key: key.clone(),
            number,
            head_sha: annotation(ANNOTATION_HEAD)?,
        },
        repository: annotation(ANNOTATION_REPOSITORY).unwrap_or_default(),
        plan: ObjectPlan {
            key,
            path: String::new(),
            outcome,
        },
        approval: data
            .get(KEY_APPROVAL)
            .and_then(|a| serde_json::from_str::<PullApproval>(a).ok())
            // Only an approval of what is stored now: a new head's plan leaves none.
            .filter(|a| {
                Some(&a.head_sha) == annotation(ANNOTATION_HEAD).as_ref()
                    && Some(&a.digest) == data.get(KEY_DIGEST)
                    && a.number == number
                    && !a.digest.is_empty()
            }),
        merged: annotation(ANNOTATION_MERGED),
        reported: annotation(ANNOTATION_REPORTED).unwrap_or_default(),
        signature: annotation(ANNOTATION_SIGNATURE).unwrap_or_default(),
        digest: data.get(KEY_DIGEST).cloned().unwrap_or_default(),
    })
}

/// The outcome without its text (stored under its own key, readable with `kubectl`), and the
/// text.
fn split_text(outcome: &Outcome) -> (Outcome, String) {
    match outcome {
        Outcome::Planned {
            summary,
            replaced,
            warnings,
            denials,
            text,
        } => (
            Outcome::Planned {
                summary: *summary,
                replaced: replaced.clone(),
                warnings: warnings.clone(),
                denials: denials.clone(),
                text: String::new(),
            },
            text.clone(),
        ),
        other => (other.clone(), String::new()),
    }
}

/// `text` within `max` bytes, cut on a line and saying so.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let kept = text[..end]
        .rsplit_once('\n')
        .map_or(&text[..end], |(a, _)| a);
    format!("{kept}\n… (cut: the plan's text is longer than {max} bytes)\n")
}
