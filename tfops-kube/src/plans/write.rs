//! Saving a plan: every other object first, the head Secret last, then what is left of the
//! previous plan removed.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch};
use tfops_core::api::ObjectKey;
use tfops_core::naming::{plan_secret_name, readable_plan_name};
use tfops_core::ports::{PortError, StoredPlan};

use crate::error::port_error;
use crate::meta::apply_params;

use super::data::{delete_ignoring_absent, text, to_json};
use super::{
    ANNOTATION_UPLOAD, KEY_CHUNK, KEY_HEADER, KEY_INDEX, KEY_META, KEY_TEXT, KubePlanStore, Meta,
    Part, bundle,
};

impl KubePlanStore {
    /// Saves `plan` as the plan of `workspace` (see the module's documentation).
    pub(super) async fn save_plan(
        &self,
        object: &ObjectKey,
        workspace: &str,
        plan: &StoredPlan,
    ) -> Result<(), PortError> {
        if self.keep_secrets {
            // Replacing a plan removes the previous one's Secrets, which this store never does:
            // saving here would leave an old plan readable beside the new one.
            return Err(PortError::Invalid(
                "this plan store deletes no Secrets and so cannot replace a plan; plans are stored by the runner that makes them".into(),
            ));
        }
        let owners = self.owner.references(object).await?;
        let now = jiff::Timestamp::now().as_nanosecond();
        let sha = tfops_core::digest::sha256_hex(&plan.binary);
        let upload = format!("{now:x}-{}", &sha[..12]);
        let readable_upload = format!("{upload}-r");
        let digest = tfops_core::plan::content_digest(&plan.shown.json).ok();
        let digest = digest.as_deref();
        let bundled = bundle(&plan.binary, &plan.shown.json);
        let head_name = plan_secret_name(workspace, &object.name);
        let (index, mut parts) =
            Self::parts(&self.binary, &bundled, &plan.id, &upload, &head_name)?;
        let readable_head = readable_plan_name(workspace, &object.name);
        let (rindex, mut rparts) = Self::parts(
            &self.readable,
            plan.shown.readable.as_bytes(),
            &plan.id,
            &readable_upload,
            &readable_head,
        )?;
        let meta = Meta {
            id: plan.id.clone(),
            is_destroy: plan.is_destroy,
            is_drift: plan.is_drift,
            readable_upload: readable_upload.clone(),
        };
        parts[0].extra.insert(KEY_INDEX.into(), to_json(&index)?);
        parts[0].extra.insert(KEY_META.into(), to_json(&meta)?);
        rparts[0].extra.insert(KEY_INDEX.into(), to_json(&rindex)?);
        // Readable first, head Secret last: the head is what makes the plan visible.
        rparts.rotate_left(1);
        for part in rparts {
            let map = Self::readable_part(object, workspace, &plan.id, part, &owners)?;
            self.write_config_map(object, map).await?;
        }
        parts.rotate_left(1);
        for part in parts {
            let secret = Self::binary_part(object, workspace, &plan.id, part, &owners, digest)?;
            self.write_secret(object, secret).await?;
        }
        // The new plan is whole and visible; what is left of the previous one goes.
        self.remove_stale(object, workspace, Some((&upload, &readable_upload)))
            .await
    }

    /// The ConfigMap of one part of the readable plan.
    fn readable_part(
        object: &ObjectKey,
        workspace: &str,
        plan_id: &str,
        part: Part,
        owners: &[OwnerReference],
    ) -> Result<ConfigMap, PortError> {
        let metadata = Self::metadata(
            object,
            workspace,
            "readable",
            &part.name,
            plan_id,
            &part.header,
            owners,
            None,
        );
        let mut data = BTreeMap::new();
        data.insert(KEY_HEADER.to_string(), text(to_json(&part.header)?)?);
        data.insert(KEY_TEXT.to_string(), text(part.data)?);
        for (k, v) in part.extra {
            data.insert(k, text(v)?);
        }
        Ok(ConfigMap {
            metadata,
            data: Some(data),
            ..ConfigMap::default()
        })
    }

    /// The Secret of one part of the bundled plan; the head carries the plan's digest.
    fn binary_part(
        object: &ObjectKey,
        workspace: &str,
        plan_id: &str,
        part: Part,
        owners: &[OwnerReference],
        digest: Option<&str>,
    ) -> Result<Secret, PortError> {
        let head = part.header.index == 0;
        let metadata = Self::metadata(
            object,
            workspace,
            "binary",
            &part.name,
            plan_id,
            &part.header,
            owners,
            digest.filter(|_| head),
        );
        let mut data = BTreeMap::new();
        data.insert(KEY_HEADER.to_string(), ByteString(to_json(&part.header)?));
        data.insert(KEY_CHUNK.to_string(), ByteString(part.data));
        for (k, v) in part.extra {
            data.insert(k, ByteString(v));
        }
        Ok(Secret {
            metadata,
            type_: Some("Opaque".into()),
            data: Some(data),
            ..Secret::default()
        })
    }

    async fn write_secret(&self, object: &ObjectKey, secret: Secret) -> Result<(), PortError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        self.secrets(object)
            .patch(&name, &apply_params(), &Patch::Apply(&secret))
            .await
            .map_err(|e| {
                port_error(
                    &format!("writing plan Secret {}/{name}", object.namespace),
                    e,
                )
            })?;
        Ok(())
    }

    async fn write_config_map(&self, object: &ObjectKey, map: ConfigMap) -> Result<(), PortError> {
        let name = map.metadata.name.clone().unwrap_or_default();
        self.config_maps(object)
            .patch(&name, &apply_params(), &Patch::Apply(&map))
            .await
            .map_err(|e| {
                port_error(
                    &format!("writing plan ConfigMap {}/{name}", object.namespace),
                    e,
                )
            })?;
        Ok(())
    }

    /// Removes the plan objects under `workspace` but those of `keep` (the binary and the
    /// readable upload); all of them without.
    pub(super) async fn remove_stale(
        &self,
        object: &ObjectKey,
        workspace: &str,
        keep: Option<(&str, &str)>,
    ) -> Result<(), PortError> {
        let (binary, readable) = keep.unwrap_or_default();
        let doing = |what: &str| format!("removing old plan objects of {object}: {what}");
        // Without `keep` nothing is kept; an object without an upload is never kept.
        let stale = |meta: &ObjectMeta, kept: &str| {
            let upload = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_UPLOAD));
            keep.is_none() || upload.is_none_or(|u| u != kept)
        };
        let secrets = self.secrets(object);
        let found = if self.keep_secrets {
            Vec::new()
        } else {
            secrets
                .list(&Self::selector(object, workspace, "binary"))
                .await
                .map_err(|e| port_error(&doing("listing Secrets"), e))?
                .items
        };
        for s in found.iter().filter(|s| stale(&s.metadata, binary)) {
            let name = s.metadata.name.clone().unwrap_or_default();
            delete_ignoring_absent(secrets.delete(&name, &DeleteParams::default()).await)
                .map_err(|e| port_error(&doing(&name), e))?;
        }
        let maps = self.config_maps(object);
        let found = maps
            .list(&Self::selector(object, workspace, "readable"))
            .await
            .map_err(|e| port_error(&doing("listing ConfigMaps"), e))?;
        for m in found.items.iter().filter(|m| stale(&m.metadata, readable)) {
            let name = m.metadata.name.clone().unwrap_or_default();
            delete_ignoring_absent(maps.delete(&name, &DeleteParams::default()).await)
                .map_err(|e| port_error(&doing(&name), e))?;
        }
        Ok(())
    }
}
