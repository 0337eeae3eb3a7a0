//! Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which client-go's typed clients send: kubectl for the built-in kinds it creates, Terraform's
//! kubernetes backend (since 1.13) for its lock Leases and delete options.
//!
//! The wire format: the magic `k8s\0`, then a `runtime.Unknown` message whose `typeMeta` names
//! the kind and whose `raw` holds the object's own message. The messages come from `k8s-pb`;
//! turning them into the JSON the registry works on is done here, field by field, for the kinds
//! clients send so (no maintained crate converts `k8s-pb` messages to JSON: they carry no serde).
//! Answers stay JSON, which client-go accepts whatever it asked for.

use base64::Engine;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;
use serde_json::{Map, Value, json};

use super::errors::ApiError;

/// The media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf body into the JSON object it encodes.
///
/// # Errors
/// 400 for a body without the envelope, of a kind this server does not decode, or that does
/// not parse.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| ApiError::bad_request("a protobuf body must start with k8s\\0"))?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope).map_err(bad)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let mut object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => namespace(&raw)?,
        ("v1", "Secret") => secret(&raw)?,
        ("v1", "ConfigMap") => config_map(&raw)?,
        ("v1", "ServiceAccount") => service_account(&raw)?,
        ("coordination.k8s.io/v1", "Lease") => lease(&raw)?,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => access_review(&raw)?,
        ("authentication.k8s.io/v1", "TokenRequest") => token_request(&raw)?,
        // Delete options travel with the version of the group they are sent to.
        (_, "DeleteOptions") => delete_options(&raw)?,
        _ => {
            return Err(ApiError::bad_request(format!(
                "this loopback server does not decode {kind} ({api_version}) from protobuf; send JSON"
            )));
        }
    };
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

fn bad(e: prost::DecodeError) -> ApiError {
    ApiError::bad_request(format!("the protobuf body does not parse: {e}"))
}

/// Inserts `value` under `key` unless it is empty, as JSON encoding omits empty fields.
fn put(map: &mut Map<String, Value>, key: &str, value: Value) {
    let empty = match &value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    if !empty {
        map.insert(key.to_string(), value);
    }
}

fn time(t: Option<&meta::Time>) -> Value {
    t.and_then(|t| jiff::Timestamp::new(t.seconds.unwrap_or(0), 0).ok())
        .map_or(Value::Null, |t| {
            json!(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        })
}

fn micro_time(t: Option<&meta::MicroTime>) -> Value {
    t.and_then(|t| jiff::Timestamp::new(t.seconds.unwrap_or(0), t.nanos.unwrap_or(0)).ok())
        .map_or(Value::Null, |t| {
            json!(t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        })
}

fn strings(map: &std::collections::BTreeMap<String, String>) -> Value {
    json!(map)
}

fn bytes(map: &std::collections::BTreeMap<String, Vec<u8>>) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD;
    Value::Object(
        map.iter()
            .map(|(k, v)| (k.clone(), json!(b64.encode(v))))
            .collect(),
    )
}

fn object_meta(m: Option<&meta::ObjectMeta>) -> Value {
    let Some(m) = m else {
        return json!({});
    };
    let mut out = Map::new();
    put(&mut out, "name", json!(m.name));
    put(&mut out, "generateName", json!(m.generate_name));
    put(&mut out, "namespace", json!(m.namespace));
    put(&mut out, "uid", json!(m.uid));
    put(&mut out, "resourceVersion", json!(m.resource_version));
    if let Some(g) = m.generation {
        out.insert("generation".into(), json!(g));
    }
    put(
        &mut out,
        "creationTimestamp",
        time(m.creation_timestamp.as_ref()),
    );
    put(
        &mut out,
        "deletionTimestamp",
        time(m.deletion_timestamp.as_ref()),
    );
    put(&mut out, "labels", strings(&m.labels));
    put(&mut out, "annotations", strings(&m.annotations));
    put(&mut out, "finalizers", json!(m.finalizers));
    let owners: Vec<Value> = m
        .owner_references
        .iter()
        .map(|o| {
            let mut r = Map::new();
            put(&mut r, "apiVersion", json!(o.api_version));
            put(&mut r, "kind", json!(o.kind));
            put(&mut r, "name", json!(o.name));
            put(&mut r, "uid", json!(o.uid));
            if let Some(c) = o.controller {
                r.insert("controller".into(), json!(c));
            }
            if let Some(b) = o.block_owner_deletion {
                r.insert("blockOwnerDeletion".into(), json!(b));
            }
            Value::Object(r)
        })
        .collect();
    put(&mut out, "ownerReferences", json!(owners));
    Value::Object(out)
}

fn namespace(raw: &[u8]) -> Result<Value, ApiError> {
    let ns = k8s_pb::api::core::v1::Namespace::decode(raw).map_err(bad)?;
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(ns.metadata.as_ref()));
    if let Some(spec) = &ns.spec {
        let mut s = Map::new();
        put(&mut s, "finalizers", json!(spec.finalizers));
        put(&mut out, "spec", Value::Object(s));
    }
    Ok(Value::Object(out))
}

fn secret(raw: &[u8]) -> Result<Value, ApiError> {
    let s = k8s_pb::api::core::v1::Secret::decode(raw).map_err(bad)?;
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(s.metadata.as_ref()));
    put(&mut out, "data", bytes(&s.data));
    put(&mut out, "stringData", strings(&s.string_data));
    put(&mut out, "type", json!(s.r#type));
    if let Some(i) = s.immutable {
        out.insert("immutable".into(), json!(i));
    }
    Ok(Value::Object(out))
}

fn config_map(raw: &[u8]) -> Result<Value, ApiError> {
    let c = k8s_pb::api::core::v1::ConfigMap::decode(raw).map_err(bad)?;
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(c.metadata.as_ref()));
    put(&mut out, "data", strings(&c.data));
    put(&mut out, "binaryData", bytes(&c.binary_data));
    if let Some(i) = c.immutable {
        out.insert("immutable".into(), json!(i));
    }
    Ok(Value::Object(out))
}

fn service_account(raw: &[u8]) -> Result<Value, ApiError> {
    let sa = k8s_pb::api::core::v1::ServiceAccount::decode(raw).map_err(bad)?;
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(sa.metadata.as_ref()));
    let pulls: Vec<Value> = sa
        .image_pull_secrets
        .iter()
        .map(|r| json!({"name": r.name}))
        .collect();
    put(&mut out, "imagePullSecrets", json!(pulls));
    if let Some(a) = sa.automount_service_account_token {
        out.insert("automountServiceAccountToken".into(), json!(a));
    }
    Ok(Value::Object(out))
}

fn lease(raw: &[u8]) -> Result<Value, ApiError> {
    let l = k8s_pb::api::coordination::v1::Lease::decode(raw).map_err(bad)?;
    let mut out = Map::new();
    out.insert("metadata".into(), object_meta(l.metadata.as_ref()));
    let mut spec = Map::new();
    if let Some(s) = &l.spec {
        // An empty holder is a holder ("" counts as locked for Terraform): keep it.
        if let Some(h) = &s.holder_identity {
            spec.insert("holderIdentity".into(), json!(h));
        }
        if let Some(d) = s.lease_duration_seconds {
            spec.insert("leaseDurationSeconds".into(), json!(d));
        }
        put(
            &mut spec,
            "acquireTime",
            micro_time(s.acquire_time.as_ref()),
        );
        put(&mut spec, "renewTime", micro_time(s.renew_time.as_ref()));
        if let Some(t) = s.lease_transitions {
            spec.insert("leaseTransitions".into(), json!(t));
        }
        put(&mut spec, "strategy", json!(s.strategy));
        put(&mut spec, "preferredHolder", json!(s.preferred_holder));
    }
    out.insert("spec".into(), Value::Object(spec));
    Ok(Value::Object(out))
}

fn access_review(raw: &[u8]) -> Result<Value, ApiError> {
    let r = k8s_pb::api::authorization::v1::SelfSubjectAccessReview::decode(raw).map_err(bad)?;
    let mut attributes = Map::new();
    if let Some(a) = r.spec.as_ref().and_then(|s| s.resource_attributes.as_ref()) {
        for (key, value) in [
            ("namespace", &a.namespace),
            ("verb", &a.verb),
            ("group", &a.group),
            ("version", &a.version),
            ("resource", &a.resource),
            ("subresource", &a.subresource),
            ("name", &a.name),
        ] {
            put(&mut attributes, key, json!(value));
        }
    }
    Ok(json!({
        "metadata": object_meta(r.metadata.as_ref()),
        "spec": {"resourceAttributes": attributes},
    }))
}

fn token_request(raw: &[u8]) -> Result<Value, ApiError> {
    let t = k8s_pb::api::authentication::v1::TokenRequest::decode(raw).map_err(bad)?;
    let mut spec = Map::new();
    if let Some(s) = &t.spec {
        put(&mut spec, "audiences", json!(s.audiences));
        if let Some(e) = s.expiration_seconds {
            spec.insert("expirationSeconds".into(), json!(e));
        }
    }
    Ok(json!({"metadata": object_meta(t.metadata.as_ref()), "spec": spec}))
}

fn delete_options(raw: &[u8]) -> Result<Value, ApiError> {
    let d = meta::DeleteOptions::decode(raw).map_err(bad)?;
    let mut out = Map::new();
    if let Some(g) = d.grace_period_seconds {
        out.insert("gracePeriodSeconds".into(), json!(g));
    }
    if let Some(p) = &d.preconditions {
        let mut pre = Map::new();
        put(&mut pre, "uid", json!(p.uid));
        put(&mut pre, "resourceVersion", json!(p.resource_version));
        put(&mut out, "preconditions", Value::Object(pre));
    }
    if let Some(o) = d.orphan_dependents {
        out.insert("orphanDependents".into(), json!(o));
    }
    put(&mut out, "propagationPolicy", json!(d.propagation_policy));
    put(&mut out, "dryRun", json!(d.dry_run));
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        body
    }

    #[test]
    fn a_lease_decodes_with_its_holder_and_lock_info() {
        let lease = k8s_pb::api::coordination::v1::Lease {
            metadata: Some(meta::ObjectMeta {
                name: Some("lock-tfstate-default-app".into()),
                resource_version: Some("7".into()),
                annotations: [("app.terraform.io/lock-info".into(), "{}".into())].into(),
                ..Default::default()
            }),
            spec: Some(k8s_pb::api::coordination::v1::LeaseSpec {
                holder_identity: Some("abc".into()),
                renew_time: Some(meta::MicroTime {
                    seconds: Some(1_800_000_000),
                    nanos: Some(5_000),
                }),
                ..Default::default()
            }),
        };
        let v = decode(&envelope(
            "coordination.k8s.io/v1",
            "Lease",
            lease.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(v["kind"], "Lease");
        assert_eq!(v["metadata"]["name"], "lock-tfstate-default-app");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(
            v["metadata"]["annotations"]["app.terraform.io/lock-info"],
            "{}"
        );
        assert_eq!(v["spec"]["holderIdentity"], "abc");
        assert_eq!(v["spec"]["renewTime"], "2027-01-15T08:00:00.000005Z");
        assert!(v["metadata"].get("uid").is_none());
    }

    #[test]
    fn secret_data_becomes_base64_and_foreign_bodies_are_refused() {
        let s = k8s_pb::api::core::v1::Secret {
            metadata: Some(meta::ObjectMeta {
                name: Some("db".into()),
                ..Default::default()
            }),
            data: [("k".into(), b"\x00\xff".to_vec())].into(),
            ..Default::default()
        };
        let v = decode(&envelope("v1", "Secret", s.encode_to_vec())).unwrap();
        assert_eq!(v["data"]["k"], "AP8=");
        assert_eq!(decode(b"{}").unwrap_err().code, 400);
        let e = decode(&envelope("apps/v1", "Deployment", vec![])).unwrap_err();
        assert!(e.message.contains("Deployment"), "{e}");
    }
}
