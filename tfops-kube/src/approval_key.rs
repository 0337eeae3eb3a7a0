//! The key that signs the approvals a merged pull request carries to the apply. The records
//! live in ConfigMaps of the object's namespace, where runner Pods (running a pull request's
//! code with the plan identity) may write: a record counts only with a signature made by the
//! manager with this key, kept in a Secret of the manager's own namespace that no runner reads.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use tfops_core::ports::{PortError, PullApproval};

use crate::error::port_error;

/// The Secret's key holding the key.
const KEY: &str = "key";

/// A key that signs and checks approval records.
#[derive(Clone)]
pub struct ApprovalKey(ring::hmac::Key);

impl std::fmt::Debug for ApprovalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApprovalKey(…)")
    }
}

impl ApprovalKey {
    /// A key of these bytes.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        Self(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, bytes))
    }

    /// The key in Secret `name` of `namespace`, made (32 random bytes) when there is none; two
    /// replicas making it at once both end with the one created first.
    ///
    /// # Errors
    /// The API's error, or a Secret without the key.
    pub async fn load_or_create(
        client: kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<Self, PortError> {
        let api: Api<Secret> = Api::namespaced(client, namespace);
        let what = format!("the pull-request approval key Secret {namespace}/{name}");
        for _ in 0..2 {
            if let Some(secret) = api.get_opt(name).await.map_err(|e| port_error(&what, e))? {
                let bytes = secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(KEY))
                    .filter(|b| b.0.len() >= 32)
                    .ok_or_else(|| PortError::Invalid(format!("{what} has no key `{KEY}`")))?;
                return Ok(Self::from_bytes(&bytes.0));
            }
            let mut bytes = [0u8; 32];
            ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
                .map_err(|_| PortError::Unavailable("no random bytes for the key".into()))?;
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(namespace.to_string()),
                    ..ObjectMeta::default()
                },
                data: Some([(KEY.to_string(), ByteString(bytes.to_vec()))].into()),
                ..Secret::default()
            };
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => return Ok(Self::from_bytes(&bytes)),
                // Another replica made it first: read theirs.
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(port_error(&what, e)),
            }
        }
        Err(PortError::Unavailable(format!(
            "{what}: created and gone again"
        )))
    }

    /// The signature (hex) of `approval` of the object `namespace/name`, merged at `merge_sha`.
    pub fn sign(
        &self,
        namespace: &str,
        name: &str,
        approval: &PullApproval,
        merge_sha: &str,
    ) -> String {
        let tag = ring::hmac::sign(
            &self.0,
            message(namespace, name, approval, merge_sha).as_bytes(),
        );
        tfops_core::digest::hex(tag.as_ref())
    }

    /// Whether `signature` is this key's of that record (compared in constant time).
    pub fn verify(
        &self,
        namespace: &str,
        name: &str,
        approval: &PullApproval,
        merge_sha: &str,
        signature: &str,
    ) -> bool {
        let Some(tag) = unhex(signature) else {
            return false;
        };
        ring::hmac::verify(
            &self.0,
            message(namespace, name, approval, merge_sha).as_bytes(),
            &tag,
        )
        .is_ok()
    }
}

/// Everything the record says, one field per line.
fn message(namespace: &str, name: &str, a: &PullApproval, merge_sha: &str) -> String {
    let s = &a.summary;
    format!(
        "tfops pull-request approval v1\n{namespace}\n{name}\n{}\n{}\n{}\n{}\n{},{},{}\n{merge_sha}",
        a.number,
        a.head_sha,
        a.digest,
        a.reviewers.join(","),
        s.add,
        s.change,
        s.destroy
    )
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tfops_core::ports::PlanSummary;

    #[test]
    fn a_record_changed_in_any_field_or_signed_with_another_key_does_not_verify() {
        let key = ApprovalKey::from_bytes(&[7; 32]);
        let approval = PullApproval {
            number: 3,
            head_sha: "h".into(),
            digest: "d".into(),
            summary: PlanSummary {
                add: 1,
                change: 0,
                destroy: 0,
            },
            reviewers: vec!["alice".into()],
        };
        let signature = key.sign("team-a", "vpc", &approval, "m");
        assert!(key.verify("team-a", "vpc", &approval, "m", &signature));
        assert!(!key.verify("team-b", "vpc", &approval, "m", &signature));
        assert!(!key.verify("team-a", "vpc", &approval, "other", &signature));
        let mut forged = approval.clone();
        forged.digest = "e".into();
        assert!(!key.verify("team-a", "vpc", &forged, "m", &signature));
        let other = ApprovalKey::from_bytes(&[8; 32]);
        assert!(!other.verify("team-a", "vpc", &approval, "m", &signature));
        assert!(!key.verify("team-a", "vpc", &approval, "m", "zz"));
    }
}
