//! OpenTofu's own features through the operator on the test cluster, untouched by tfops:
//! state and plan encryption from `TF_ENCRYPTION` (a Secret through `envFrom`) with the
//! kubernetes backend, and the warning when OpenTofu's state nears what one Secret holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Read;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::operator::{Operator, pending, ready_with};
use tfops_core::api::ObjectKey;
use tfops_core::ports::PlanStore;
use tfops_kube::KubePlanStore;
use tfops_kube::meta::Owner;

/// The body of an `encryption` block: a passphrase-derived key encrypting state and plans,
/// enforced (an unencrypted state or plan is an error).
const ENCRYPTION: &str = r#"
key_provider "pbkdf2" "main" {
  passphrase = "correct-horse-battery-staple"
}
method "aes_gcm" "main" {
  keys = key_provider.pbkdf2.main
}
state {
  method   = method.aes_gcm.main
  enforced = true
}
plan {
  method   = method.aes_gcm.main
  enforced = true
}
"#;

/// The state JSON inside a state Secret (the backend gzips it).
fn stored_state(secret: &Secret) -> String {
    let gz = &secret.data.as_ref().unwrap()["tfstate"].0;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn encrypted_state_and_plans_work_end_to_end_with_the_kubernetes_backend() {
    let op = Operator::start().await;
    let secrets: Api<Secret> = Api::namespaced(op.admin.clone(), "team-a");
    secrets
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": "tofu-encryption"},
                "stringData": {"TF_ENCRYPTION": ENCRYPTION},
            })),
        )
        .await
        .unwrap();
    op.apply(&op.manifest(
        "sealed",
        json!({
            "writeOutputsToSecret": {"name": "sealed-outputs"},
            "vars": [{"name": "greeting", "value": "top-secret-greeting"}],
            "runner": {"binary": "tofu", "podTemplate": {"spec": {
                "envFrom": [{"secretRef": {"name": "tofu-encryption"}}],
            }}},
        }),
    ));

    // The plan waits for approval; what the approver reads is OpenTofu's plan text, although
    // the plan file itself is encrypted.
    let t = op
        .wait_for("sealed", "waited for approval", 180, |t| {
            ready_with(t, "TerraformPlannedWithChanges") && !pending(t).is_empty()
        })
        .await;
    let id = pending(&t);
    let stored = KubePlanStore::new(op.admin.clone(), Owner::None)
        .load(&ObjectKey::new("team-a", "sealed"), "default")
        .await
        .unwrap()
        .expect("the pending plan is stored");
    assert!(
        stored
            .shown
            .readable
            .contains("terraform_data.x will be created"),
        "{}",
        stored.shown.readable
    );
    assert!(
        !stored.binary.starts_with(b"PK"),
        "the stored plan file is OpenTofu's encrypted form, not a plain zip"
    );

    op.approve("sealed", &id, "t1").await;
    let t = op
        .wait_for("sealed", "applied", 180, |t| {
            ready_with(t, "TerraformOutputsWritten") || ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    assert!(
        t.status
            .unwrap()
            .binary
            .unwrap_or_default()
            .starts_with("tofu 1."),
        "run by OpenTofu"
    );

    // The state Secret holds ciphertext: the variable's value is nowhere in it.
    let state = stored_state(&secrets.get("tfstate-default-sealed").await.unwrap());
    let envelope: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert!(envelope["encrypted_data"].is_string(), "{state}");
    assert!(!state.contains("top-secret-greeting"), "{state}");
    assert!(!state.contains("terraform_data"), "{state}");
    // The outputs, read by OpenTofu with the key, are written as usual.
    let outputs = secrets.get("sealed-outputs").await.unwrap();
    assert_eq!(outputs.data.unwrap()["greeting"].0, b"top-secret-greeting");
}

/// An output of `16 * rows` SHA-512 digests in hex: state that gzip cannot shrink much (about
/// 67 bytes of gzipped state per digest; `range` makes at most 1,024 values, hence two levels).
const BIG_STATE: &str = r#"
variable "rows" {
  type = number
}
output "blob" {
  value = join("", flatten([for i in range(var.rows) : [for j in range(16) : sha512("${i}-${j}")]]))
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_state_near_the_secret_limit_warns_with_opentofu() {
    let op = Operator::start().await;
    op.git.commit("big", &[("main.tf", BIG_STATE)]);
    // 820 rows: about 860 KiB of gzipped state (750 made 807,440 bytes), past 80% of a
    // Secret's 1 MiB and still inside it.
    op.apply(&op.manifest(
        "big",
        json!({
            "approvePlan": "auto",
            "sourceRef": {"kind": "GitRepository", "url": op.git.url("big")},
            "vars": [{"name": "rows", "value": 820}],
            "runner": {"binary": "tofu"},
        }),
    ));
    op.wait_for("big", "applied", 240, |t| {
        ready_with(t, "TerraformAppliedSucceed") || ready_with(t, "TerraformOutputsWritten")
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(op.admin.clone(), "team-a");
    let state = secrets.get("tfstate-default-big").await.unwrap();
    let stored = state.data.unwrap()["tfstate"].0.len();
    assert!(
        stored > 838_860,
        "{stored} bytes stored: the test needs more"
    );

    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(op.admin.clone(), "team-a");
    let warned = async {
        loop {
            let found = events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("StateNearSizeLimit"));
            if let Some(e) = found {
                return e;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    let event = tokio::time::timeout(std::time::Duration::from_secs(30), warned)
        .await
        .expect("a StateNearSizeLimit event");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("tfstate-default-big") && note.contains("cannot split state"),
        "{note}"
    );
}
