//! Outputs in a ConfigMap on the operator, end to end with real Terraform: the outputs
//! Terraform does not mark sensitive land as text in `spec.writeOutputsToConfigMap`, written
//! by the runner's identity; selecting a sensitive one fails the run naming it and changes
//! nothing; a rename removes the old ConfigMap; deleting the object removes the ConfigMap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use support::operator::{Operator, condition, ready_with};

/// Outputs of every kind a consumer reads: a string, an object, a number, and a secret.
const OUTPUTS: &str = r#"variable "greeting" {
  type    = string
  default = "hello"
}
resource "terraform_data" "x" {
  input = var.greeting
}
output "greeting" {
  value = terraform_data.x.output
}
output "endpoint" {
  value = { host = "db.internal", port = 5432 }
}
output "replicas" {
  value = 3
}
output "password" {
  value     = "hunter2-${var.greeting}"
  sensitive = true
}
"#;

fn text(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn applied(t: &tfops_kube::Terraform) -> bool {
    ready_with(t, "TerraformAppliedSucceed") || ready_with(t, "TerraformPlannedNoChanges")
}

async fn patch_spec(op: &Operator, spec: serde_json::Value) {
    op.terraforms()
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outputs_not_sensitive_go_to_a_config_map_and_a_sensitive_one_is_refused_by_name() {
    let op = Operator::start().await;
    op.git.commit("outputs", &[("main.tf", OUTPUTS)]);
    op.apply(&op.manifest(
        "app",
        json!({"approvePlan": "auto", "sourceRef": {"url": op.git.url("outputs")},
               "writeOutputsToSecret": {"name": "app-secret"},
               "writeOutputsToConfigMap": {"name": "app-values", "labels": {"team": "a"}}}),
    ));
    let t = op.wait_for("app", "became Ready", 120, applied).await;
    let maps: Api<ConfigMap> = Api::namespaced(op.admin.clone(), "team-a");
    let values = maps.get("app-values").await.unwrap();
    // What Helm values, Kustomize replacements and ApplicationSets read: text, no secret.
    assert_eq!(
        values.data.clone().unwrap(),
        text(&[
            ("endpoint", r#"{"host":"db.internal","port":5432}"#),
            ("greeting", "hello"),
            ("replicas", "3"),
        ])
    );
    assert_eq!(values.metadata.labels.clone().unwrap()["team"], "a");
    assert_eq!(
        values.metadata.owner_references.clone().unwrap()[0].uid,
        t.metadata.uid.clone().unwrap()
    );
    let secrets: Api<Secret> = Api::namespaced(op.admin.clone(), "team-a");
    let secret = secrets.get("app-secret").await.unwrap().data.unwrap();
    assert_eq!(
        secret["password"].0, b"hunter2-hello",
        "the Secret has it all"
    );
    let status = t.status.clone().unwrap();
    assert_eq!(status.outputs_config_map.as_deref(), Some("app-values"));
    assert_eq!(
        condition(&t, "Output").unwrap().2,
        "4 outputs, written to Secret app-secret and ConfigMap app-values"
    );
    // The runner wrote it with its own identity; the controller wrote no outputs.
    let writers: Vec<String> = op
        .cluster
        .audit()
        .into_iter()
        .filter(|a| {
            a.resource == "configmaps"
                && a.name == "app-values"
                && matches!(a.verb.as_str(), "create" | "patch" | "update")
        })
        .map(|a| a.user)
        .collect();
    assert!(
        !writers.is_empty()
            && writers
                .iter()
                .all(|u| u == "system:serviceaccount:team-a:tf-runner"),
        "{writers:?}"
    );

    // Asking for the sensitive output there fails the run, naming it; nothing changes.
    patch_spec(
        &op,
        json!({"writeOutputsToConfigMap": {"outputs": ["greeting", "password:db-password"]}}),
    )
    .await;
    let t = op
        .wait_for("app", "refused the sensitive output", 120, |t| {
            ready_with(t, "OutputsWritingFailed")
        })
        .await;
    let (status, _, message) = condition(&t, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains(r#"output "password" is marked sensitive by Terraform"#)
            && message.contains("write it with writeOutputsToSecret"),
        "{message}"
    );
    assert_eq!(
        maps.get("app-values").await.unwrap().data,
        values.data,
        "the ConfigMap is as it was"
    );

    // Renamed, with renamed keys: the old ConfigMap goes.
    patch_spec(
        &op,
        json!({"writeOutputsToConfigMap": {"name": "app-cfg", "labels": null,
               "outputs": ["endpoint:db.json", "replicas"]}}),
    )
    .await;
    let t = op.wait_for("app", "became Ready again", 120, applied).await;
    assert_eq!(
        maps.get("app-cfg").await.unwrap().data.unwrap(),
        text(&[
            ("db.json", r#"{"host":"db.internal","port":5432}"#),
            ("replicas", "3")
        ])
    );
    assert!(maps.get_opt("app-values").await.unwrap().is_none());
    assert_eq!(
        t.status.unwrap().outputs_config_map.as_deref(),
        Some("app-cfg")
    );

    // Deleted (resources kept): its ConfigMap goes with it.
    let uid = t.metadata.uid.clone().unwrap();
    op.terraforms()
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = await_condition(op.terraforms(), "app", conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(120), deleted)
        .await
        .expect("app released")
        .unwrap();
    let gone = await_condition(maps.clone(), "app-cfg", |m: Option<&ConfigMap>| m.is_none());
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("the outputs ConfigMap removed")
        .unwrap();
}
