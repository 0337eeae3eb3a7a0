//! The `Terraform` API as users write it: defaults, wire names, unknown fields, the schema,
//! validation messages and Argo CD health.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::object;
use serde_json::json;
use tfops_core::api::{Binary, DriftAction, ForceUnlock, TerraformSpec, TerraformStatus, validate};
use tfops_core::conditions::{self, ConditionStatus, ConditionType, Reason};
use tfops_core::health::{HealthStatus, health};

fn minimal() -> serde_json::Value {
    json!({"sourceRef": {"kind": "GitRepository", "url": "https://git.example/infra.git"}})
}

#[test]
fn a_minimal_spec_gets_the_seeds_defaults() {
    let spec: TerraformSpec = serde_json::from_value(minimal()).unwrap();
    assert_eq!(spec.interval, "10m");
    assert_eq!(spec.retry_interval, "15s");
    assert_eq!(spec.workspace, "default");
    assert_eq!(spec.approve_plan, "");
    assert_eq!(spec.runner.binary, Binary::Auto);
    assert_eq!(spec.runner.service_account_name, "tf-runner");
    assert!(spec.runner.always_cleanup);
    assert_eq!(spec.runner.termination_grace_period_seconds, 30);
    assert_eq!(spec.remediation.retries, -1);
    assert_eq!(spec.drift_action, DriftAction::Remediate);
    assert_eq!(spec.tfstate.force_unlock, ForceUnlock::No);
    assert!(!spec.destroy_resources_on_deletion && !spec.tfstate.delete_on_destroy);
}

#[test]
fn the_wire_form_is_camel_case_and_round_trips() {
    let text = json!({
        "sourceRef": {"kind": "OCIRepository", "url": "oci://registry.example/infra", "ref": {"digest": format!("sha256:{}", "a".repeat(64))}},
        "approvePlan": "auto",
        "destroyResourcesOnDeletion": true,
        "vars": [{"name": "tags", "value": {"team": "net", "cost": [1, 2]}}],
        "varsFrom": [{"kind": "Secret", "name": "creds", "varKeys": ["token:api_token"], "optional": true}],
        "writeOutputsToSecret": {"name": "out", "outputs": ["vpc_id:id"]},
        "tfstate": {"forceUnlock": "auto"},
        "runner": {"binary": "tofu", "podTemplate": {"spec": {"env": [{"name": "TF_LOG", "value": "INFO"}], "securityContext": {"runAsUser": 65532}}}},
        "healthChecks": [{"name": "api", "type": "http", "url": "https://{{.host}}/healthz"}],
        "fileMappings": [{"secretKeyRef": {"name": "kube", "key": "config"}, "location": "home", "path": ".kube/config"}]
    });
    let spec: TerraformSpec = serde_json::from_value(text).unwrap();
    let back = serde_json::to_value(&spec).unwrap();
    for key in [
        "sourceRef",
        "approvePlan",
        "destroyResourcesOnDeletion",
        "varsFrom",
        "writeOutputsToSecret",
        "retryInterval",
    ] {
        assert!(back.get(key).is_some(), "{key} missing in {back}");
    }
    assert_eq!(
        back["runner"]["podTemplate"]["spec"]["securityContext"]["runAsUser"],
        65532
    );
    assert_eq!(back["sourceRef"]["kind"], "OCIRepository");
    assert_eq!(serde_json::from_value::<TerraformSpec>(back).unwrap(), spec);
}

#[test]
fn unknown_fields_are_named() {
    let mut text = minimal();
    text["aproovePlan"] = json!("auto");
    let err = serde_json::from_value::<TerraformSpec>(text)
        .unwrap_err()
        .to_string();
    assert!(err.contains("aproovePlan"), "{err}");
}

#[test]
fn the_schema_is_the_crd_schema() {
    let schema = serde_json::to_value(schemars::schema_for!(TerraformSpec)).unwrap();
    let text = schema.to_string();
    let props = &schema["properties"];
    assert_eq!(props["interval"]["default"], "10m");
    assert!(
        props["approvePlan"]["description"]
            .as_str()
            .unwrap()
            .contains("auto")
    );
    assert!(text.contains("x-kubernetes-preserve-unknown-fields"));
    assert!(
        schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("sourceRef"))
    );
    let status = serde_json::to_value(schemars::schema_for!(TerraformStatus)).unwrap();
    for key in [
        "observedGeneration",
        "lastAppliedRevision",
        "reconciliationFailures",
        "availableOutputs",
        "lock",
        "plan",
    ] {
        assert!(
            status["properties"].get(key).is_some(),
            "status.{key} missing"
        );
    }
}

#[test]
fn validation_lists_every_problem_with_its_field() {
    let o = object(
        "db-1",
        json!({
            "interval": "5 minutes",
            "retryInterval": "0s",
            "sourceRef": {"ref": {"branch": "main", "tag": "v1"}},
            "approvePlan": "plan-main-xyz",
            "parallelism": -2,
            "force": true,
            "planOnly": true,
            "workspace": "Prod",
            "dependsOn": [{"name": "db-1"}],
            "vars": [{"name": "a", "value": 1}, {"name": "a", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            "tfstate": {"forceUnlock": "yes", "deleteOnDestroy": true},
            "healthChecks": [{"name": "x", "type": "tcp", "timeout": "soon"}],
            "fileMappings": [{"secretKeyRef": {"name": "s", "key": "k"}, "location": "workspace", "path": "../escape"}]
        }),
    );
    let errors = validate(&o).unwrap_err();
    let fields: Vec<&str> = errors.0.iter().map(|p| p.field.as_str()).collect();
    for field in [
        "spec.interval",
        "spec.retryInterval",
        "spec.sourceRef.ref",
        "spec.approvePlan",
        "spec.parallelism",
        "spec.force",
        "spec.workspace",
        "spec.dependsOn[0]",
        "spec.vars[1].name",
        "spec.tfstate.lockIdentifier",
        "spec.tfstate.deleteOnDestroy",
        "spec.healthChecks[0]",
        "spec.healthChecks[0].timeout",
        "spec.fileMappings[0].path",
        "metadata.name",
    ] {
        assert!(
            fields.contains(&field),
            "{field} not reported; got {fields:?}"
        );
    }
    let message = errors.to_string();
    assert!(
        message.contains("Terraform 1.10+ rejects a state secret suffix ending in -<number>"),
        "{message}"
    );
}

#[test]
fn a_good_spec_validates_with_parsed_values() {
    let o = object(
        "vpc",
        json!({"interval": "1h30m", "approvePlan": "plan-main-0123456789"}),
    );
    let v = validate(&o).unwrap();
    assert_eq!(v.interval.as_secs(), 5400);
    assert_eq!(v.retry_interval.as_secs(), 15);
    // A custom suffix lifts the restriction on names ending in a number.
    let o = object("db-1", json!({"backendConfig": {"secretSuffix": "db-one"}}));
    assert!(validate(&o).is_ok());
    let o = object("db-1", json!({"backendConfig": {"disable": true}}));
    assert!(validate(&o).is_ok());
}

fn with_ready(
    status: ConditionStatus,
    reason: Reason,
    pending: &str,
    observed: i64,
) -> tfops_core::api::TerraformObject {
    let mut o = object("vpc", json!({}));
    o.metadata.generation = 2;
    o.status.observed_generation = observed;
    o.status.plan.pending = pending.into();
    conditions::set(
        &mut o.status.conditions,
        ConditionType::Ready,
        status,
        reason,
        "m",
        2,
        common::start_time(),
    );
    o
}

#[test]
fn argo_cd_health_follows_the_seeds_table() {
    use ConditionStatus::*;
    let cases = [
        (
            with_ready(True, Reason::TerraformAppliedSucceed, "", 2),
            HealthStatus::Healthy,
        ),
        (
            with_ready(True, Reason::NoDrift, "", 2),
            HealthStatus::Healthy,
        ),
        (
            with_ready(Unknown, Reason::Progressing, "", 2),
            HealthStatus::Progressing,
        ),
        (
            with_ready(Unknown, Reason::DependencyNotReady, "", 1),
            HealthStatus::Progressing,
        ),
        (
            with_ready(
                Unknown,
                Reason::TerraformPlannedWithChanges,
                "plan-main-0123456789",
                2,
            ),
            HealthStatus::Suspended,
        ),
        (
            with_ready(False, Reason::TFExecApplyFailed, "", 2),
            HealthStatus::Degraded,
        ),
        (
            with_ready(False, Reason::DriftDetected, "", 2),
            HealthStatus::Degraded,
        ),
        (
            with_ready(False, Reason::TFExecApplyFailed, "", 1),
            HealthStatus::Progressing,
        ),
        (
            with_ready(True, Reason::Suspended, "", 2),
            HealthStatus::Suspended,
        ),
    ];
    for (o, want) in cases {
        let ready = conditions::find(&o.status.conditions, ConditionType::Ready).unwrap();
        assert_eq!(
            health(&o).status,
            want,
            "{:?} {}",
            ready.status,
            ready.reason
        );
    }
    let mut suspended = object("vpc", json!({"suspend": true}));
    assert_eq!(health(&suspended).status, HealthStatus::Suspended);
    suspended.spec.suspend = false;
    assert_eq!(
        health(&suspended).status,
        HealthStatus::Progressing,
        "no Ready yet"
    );
}

#[test]
fn a_rewritten_condition_keeps_its_transition_time() {
    let t0 = common::start_time();
    let t1: tfops_core::Timestamp = "2026-11-29T13:00:00Z".parse().unwrap();
    let mut c = Vec::new();
    conditions::set(
        &mut c,
        ConditionType::Ready,
        ConditionStatus::True,
        Reason::NoDrift,
        "a",
        1,
        t0,
    );
    conditions::set(
        &mut c,
        ConditionType::Ready,
        ConditionStatus::True,
        Reason::TerraformAppliedSucceed,
        "b",
        2,
        t1,
    );
    assert_eq!(c[0].last_transition_time, t0);
    assert_eq!(c[0].reason, "TerraformAppliedSucceed");
    conditions::set(
        &mut c,
        ConditionType::Ready,
        ConditionStatus::False,
        Reason::TFExecPlanFailed,
        "c",
        2,
        t1,
    );
    assert_eq!(c[0].last_transition_time, t1);
    assert_eq!(c[0].reason_code(), Some(Reason::TFExecPlanFailed));
}
