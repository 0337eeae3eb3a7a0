//! Builders shared by the reconciler's tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tfops_core::Timestamp;
use tfops_core::api::{ObjectKey, ObjectMeta, TerraformObject};
use tfops_core::conditions::{self, ConditionStatus, ConditionType};
use tfops_core::testing::FakeWorld;

pub const REPO: &str = "https://git.example/infra.git";
pub const SHA1: &str = "1111111111aaaaaaaaaa1111111111aaaaaaaaaa";
pub const SHA2: &str = "2222222222bbbbbbbbbb2222222222bbbbbbbbbb";

pub fn start_time() -> Timestamp {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

/// A world with the repository at SHA1 holding two resources.
pub fn world() -> FakeWorld {
    let w = FakeWorld::new(start_time());
    w.publish(
        REPO,
        "main",
        SHA1,
        &[("terraform_data.a", "1"), ("terraform_data.b", "1")],
    );
    w
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// An object read from its wire form, as the API server would hand it over.
pub fn object(name: &str, spec: Value) -> TerraformObject {
    let mut full = json!({
        "sourceRef": {"kind": "GitRepository", "url": REPO, "ref": {"branch": "main"}},
    });
    merge(&mut full, spec);
    TerraformObject {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: "team-a".into(),
            generation: 1,
            ..ObjectMeta::default()
        },
        spec: serde_json::from_value(full).expect("spec"),
        status: Default::default(),
    }
}

pub fn ready(w: &FakeWorld, key: &ObjectKey) -> (ConditionStatus, String, String) {
    condition(w, key, ConditionType::Ready).expect("Ready condition")
}

pub fn condition(
    w: &FakeWorld,
    key: &ObjectKey,
    kind: ConditionType,
) -> Option<(ConditionStatus, String, String)> {
    let o = w.object(key)?;
    conditions::find(&o.status.conditions, kind)
        .map(|c| (c.status, c.reason.clone(), c.message.clone()))
}

pub async fn reconcile(w: &FakeWorld, key: &ObjectKey) -> tfops_core::reconcile::RunReport {
    w.reconcile(key)
        .await
        .expect("driver")
        .expect("object exists")
}

/// A plan's changes as address → (before, after).
pub type Changes = std::collections::BTreeMap<String, (Option<String>, Option<String>)>;

/// The changes of a plan's `show -json` as address → (before, after).
pub fn changes_of(json: &str) -> Changes {
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    doc["resource_changes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rc| {
            let c = &rc["change"];
            (
                rc["address"].as_str().unwrap().to_string(),
                (text(&c["before"]), text(&c["after"])),
            )
        })
        .collect()
}
