//! `spec.writeOutputsToConfigMap`: the outputs Terraform does not mark sensitive, as text, in a
//! ConfigMap; a selected sensitive output fails the run naming it and writes nothing; a
//! renamed or removed ConfigMap is deleted, and so is the ConfigMap of a deleted object. Each
//! holds both when the driver writes through its stores and when the runner writes itself
//! (as runner Pods do). The fake Terraform has two outputs: `resource_count` (the number of
//! resources in the state) and `token` (sensitive).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use serde_json::json;
use tfops_core::api::{ObjectKey, validate};
use tfops_core::conditions::ConditionStatus::{False, True};
use tfops_core::conditions::ConditionType;
use tfops_core::testing::FakeWorld;

fn maps(w: &FakeWorld) -> BTreeMap<String, BTreeMap<String, String>> {
    w.lock()
        .output_config_maps
        .iter()
        .map(|((_, n), data)| (n.clone(), data.clone()))
        .collect()
}

fn data(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn recorded(w: &FakeWorld, key: &ObjectKey) -> Option<String> {
    w.object(key).unwrap().status.outputs_config_map
}

#[tokio::test]
async fn only_outputs_not_marked_sensitive_are_written_as_text() {
    for runner_writes in [false, true] {
        let w = world();
        w.lock().runner_writes = runner_writes;
        let key = w.create(object(
            "vpc",
            json!({"approvePlan": "auto", "writeOutputsToConfigMap": {"name": "vpc-values"}}),
        ));
        reconcile(&w, &key).await;
        assert_eq!(ready(&w, &key).0, True);
        assert_eq!(
            maps(&w),
            [("vpc-values".into(), data(&[("resource_count", "2")]))].into(),
            "the sensitive token is left out (runner writes: {runner_writes})"
        );
        assert_eq!(recorded(&w, &key).as_deref(), Some("vpc-values"));
        let (_, reason, message) = condition(&w, &key, ConditionType::Output).unwrap();
        assert_eq!(reason, "TerraformOutputsWritten");
        assert_eq!(message, "2 outputs, written to ConfigMap vpc-values");
    }
}

#[tokio::test]
async fn a_selected_sensitive_output_fails_the_run_by_name_and_writes_nothing() {
    for runner_writes in [false, true] {
        let w = world();
        w.lock().runner_writes = runner_writes;
        let key = w.create(object(
            "vpc",
            json!({
                "approvePlan": "auto",
                "writeOutputsToSecret": {"name": "vpc-out"},
                "writeOutputsToConfigMap": {"name": "vpc-values", "outputs": ["resource_count:count", "token"]}
            }),
        ));
        reconcile(&w, &key).await;
        let (status, reason, message) = ready(&w, &key);
        assert_eq!((status, reason.as_str()), (False, "OutputsWritingFailed"));
        assert!(
            message.contains(r#"output "token" is marked sensitive by Terraform"#)
                && message.contains("ConfigMap vpc-values")
                && message.contains("write it with writeOutputsToSecret"),
            "{message}"
        );
        assert!(maps(&w).is_empty(), "no ConfigMap");
        assert!(w.lock().output_secrets.is_empty(), "nor the Secret");
        assert_eq!(recorded(&w, &key), None);
        assert_eq!(w.applies(&key), 1, "the apply itself went through");

        // The sensitive output moves to the Secret: both are written.
        w.edit(&key, |s| {
            s.write_outputs_to_config_map.as_mut().unwrap().outputs =
                vec!["resource_count:count".into()];
        });
        reconcile(&w, &key).await;
        assert_eq!(ready(&w, &key).0, True, "{:?}", ready(&w, &key));
        assert_eq!(
            maps(&w),
            [("vpc-values".into(), data(&[("count", "2")]))].into()
        );
        let secret = w.lock().output_secrets[&("team-a".into(), "vpc-out".into())].clone();
        assert_eq!(secret["token"], json!("s3cr3t"));
        let message = condition(&w, &key, ConditionType::Output).unwrap().2;
        assert_eq!(
            message,
            "2 outputs, written to Secret vpc-out and ConfigMap vpc-values"
        );
    }
}

#[tokio::test]
async fn a_renamed_or_removed_outputs_config_map_is_deleted() {
    for runner_writes in [false, true] {
        let w = world();
        w.lock().runner_writes = runner_writes;
        let key = w.create(object(
            "vpc",
            json!({"approvePlan": "auto", "writeOutputsToConfigMap": {"name": "vpc-values"}}),
        ));
        reconcile(&w, &key).await;
        assert_eq!(maps(&w).keys().collect::<Vec<_>>(), ["vpc-values"]);

        w.edit(&key, |s| {
            s.write_outputs_to_config_map.as_mut().unwrap().name = "vpc-cfg".into()
        });
        reconcile(&w, &key).await;
        assert_eq!(
            maps(&w).keys().collect::<Vec<_>>(),
            ["vpc-cfg"],
            "the old name is gone"
        );
        assert_eq!(recorded(&w, &key).as_deref(), Some("vpc-cfg"));

        w.edit(&key, |s| s.write_outputs_to_config_map = None);
        reconcile(&w, &key).await;
        assert!(maps(&w).is_empty(), "{:?}", maps(&w));
        assert_eq!(recorded(&w, &key), None);
        assert_eq!(
            condition(&w, &key, ConditionType::Output).unwrap().2,
            "2 outputs available"
        );
    }
}

#[tokio::test]
async fn deletion_removes_the_recorded_and_the_asked_for_config_map() {
    // Without destroy the driver removes it; with destroy, the runner that destroyed.
    for destroy in [false, true] {
        let w = world();
        w.lock().runner_writes = destroy;
        let key = w.create(object(
            "vpc",
            json!({"approvePlan": "auto", "destroyResourcesOnDeletion": destroy,
                   "writeOutputsToConfigMap": {"name": "vpc-values"}}),
        ));
        reconcile(&w, &key).await;
        assert_eq!(maps(&w).keys().collect::<Vec<_>>(), ["vpc-values"]);
        // Renamed in the spec and deleted before a run wrote the new name: both names go.
        w.edit(&key, |s| {
            s.write_outputs_to_config_map.as_mut().unwrap().name = "renamed".into()
        });
        w.delete(&key);
        reconcile(&w, &key).await;
        assert!(w.object(&key).is_none(), "released (destroy: {destroy})");
        assert!(maps(&w).is_empty(), "{:?}", maps(&w));
    }
}

#[test]
fn keys_and_names_are_checked_with_the_spec() {
    let o = object(
        "vpc",
        json!({"writeOutputsToConfigMap": {"name": "Vpc_Values", "outputs": ["a:b c", "x:", "y:k", "z:k", "w:.."]}}),
    );
    let errors = validate(&o).unwrap_err();
    let problems: Vec<(&str, &str)> = errors
        .0
        .iter()
        .map(|p| (p.field.as_str(), p.message.as_str()))
        .collect();
    assert_eq!(
        problems,
        [
            (
                "spec.writeOutputsToConfigMap.name",
                "must be a ConfigMap name (lowercase DNS subdomain)"
            ),
            (
                "spec.writeOutputsToConfigMap.outputs[0]",
                r#""b c" is not a ConfigMap key (letters, digits, `-`, `_` and `.`)"#
            ),
            (
                "spec.writeOutputsToConfigMap.outputs[1]",
                "write `output` or `output:key`"
            ),
            (
                "spec.writeOutputsToConfigMap.outputs[3]",
                r#"key "k" is given twice"#
            ),
            (
                "spec.writeOutputsToConfigMap.outputs[4]",
                r#"".." is not a ConfigMap key (letters, digits, `-`, `_` and `.`)"#
            ),
        ]
    );
    let o = object(
        "vpc",
        json!({"writeOutputsToConfigMap": {"name": "vpc.values", "outputs": ["db_host:db.host", "port"]}}),
    );
    assert!(validate(&o).is_ok());
}
