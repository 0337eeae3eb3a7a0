//! The Argo CD health and action scripts of `config/argocd/resource_customizations/` run as
//! Argo CD runs them (`tests::argocd_lua`), on every case of their `health_test.yaml` and
//! `actions/action_test.yaml` (Argo CD's own test format). The health cases also go through
//! `tfops_core::health::health`, which must say the same; each action's result becomes the
//! merge patch argocd-server would send, applied to the object on the real API server,
//! which validates it against the CRD. And the `argocd-cm` entries shipped in
//! `config/argocd/` are exactly these files (`TFOPS_UPDATE_ARGOCD=1` rewrites them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde::Deserialize;
use serde_json::{Value, json};
use tests::argocd_lua::{self, OfferedAction};

/// Where the extension's tarball is published (also in `argocd-server-extension.yaml`).
const EXTENSION_URL: &str =
    "https://github.com/tfops/tfops/releases/download/v0.1.0/extension-tfops.tar.gz";

/// 2026-12-01T12:00:00Z: the clock the action tests' expected outputs were written at.
const NOW: i64 = 1_796_126_400;

fn customization() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../config/argocd/resource_customizations/infra.argocd.io/Terraform")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(path: &Path) -> Value {
    serde_yaml_ng::from_str(&read(path)).unwrap()
}

#[derive(Deserialize)]
struct HealthTests {
    tests: Vec<HealthCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthCase {
    input_path: String,
    health_status: Expected,
}

#[derive(Deserialize)]
struct Expected {
    status: String,
    message: String,
}

#[test]
fn health_lua_and_the_rust_mapping_give_each_fixture_its_expected_health() {
    let dir = customization();
    let script = read(&dir.join("health.lua"));
    let lua = argocd_lua::runtime(NOW).unwrap();
    let cases: HealthTests = serde_yaml_ng::from_str(&read(&dir.join("health_test.yaml"))).unwrap();
    assert!(cases.tests.len() >= 10);
    let mut statuses = std::collections::BTreeSet::new();
    for case in cases.tests {
        let object = yaml(&dir.join(&case.input_path));
        let (status, message) = argocd_lua::health(&lua, &script, &object)
            .unwrap_or_else(|e| panic!("{}: {e}", case.input_path));
        let want = &case.health_status;
        assert_eq!(
            (status.as_str(), message.as_str()),
            (want.status.as_str(), want.message.as_str()),
            "health.lua on {}",
            case.input_path
        );
        let typed: tfops_kube::Terraform = serde_json::from_value(object).unwrap();
        let rust = tfops_core::health::health(&typed.to_object());
        assert_eq!(
            (format!("{:?}", rust.status), rust.message),
            (want.status.clone(), want.message.clone()),
            "tfops_core::health::health on {}",
            case.input_path
        );
        statuses.insert(status);
    }
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        ["Degraded", "Healthy", "Progressing", "Suspended"]
    );
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActionTests {
    discovery_tests: Vec<DiscoveryCase>,
    action_tests: Vec<ActionCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoveryCase {
    input_path: String,
    result: Vec<Offered>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Offered {
    name: String,
    disabled: bool,
    icon_class: String,
    display_name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActionCase {
    action: String,
    input_path: String,
    expected_output_path: Option<String>,
    expected_error_message: Option<String>,
}

fn tests_of_actions() -> ActionTests {
    serde_yaml_ng::from_str(&read(&customization().join("actions/action_test.yaml"))).unwrap()
}

#[test]
fn discovery_offers_each_action_only_when_it_can_act() {
    let dir = customization().join("actions");
    let script = read(&dir.join("discovery.lua"));
    let lua = argocd_lua::runtime(NOW).unwrap();
    for case in tests_of_actions().discovery_tests {
        let object = yaml(&dir.join(&case.input_path));
        let offered = argocd_lua::discover(&lua, &script, &object).unwrap();
        let expected: Vec<OfferedAction> = case
            .result
            .into_iter()
            .map(|o| OfferedAction {
                name: o.name,
                disabled: o.disabled,
                icon_class: o.icon_class,
                display_name: o.display_name,
            })
            .collect();
        assert_eq!(offered, expected, "discovery on {}", case.input_path);
        // Every offered action has its script.
        for a in &offered {
            assert!(dir.join(&a.name).join("action.lua").is_file(), "{}", a.name);
        }
    }
}

/// The object as it would be created from a fixture (what the API server sets, removed).
fn creatable(object: &Value) -> Value {
    let mut o = object.clone();
    let meta = o["metadata"].as_object_mut().unwrap();
    for server_set in [
        "uid",
        "resourceVersion",
        "generation",
        "deletionTimestamp",
        "finalizers",
    ] {
        meta.remove(server_set);
    }
    o.as_object_mut().unwrap().remove("status");
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_make_the_documented_edits_which_the_api_server_accepts() {
    let dir = customization().join("actions");
    let lua = argocd_lua::runtime(NOW).unwrap();
    let cluster = tfops_testcluster::TestCluster::start().await.unwrap();
    let client = support::client(&cluster).await;
    support::terraform_crd_served(&client).await;
    support::namespace(&client, "team-a").await;
    let resource = ApiResource::erase::<tfops_kube::Terraform>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client, "team-a", &resource);
    let cases = tests_of_actions().action_tests;
    assert!(cases.len() >= 8);
    for case in cases {
        let what = format!("{} on {}", case.action, case.input_path);
        let script = read(&dir.join(&case.action).join("action.lua"));
        let object = yaml(&dir.join(&case.input_path));
        let result = argocd_lua::action(&lua, &script, &object);
        if let Some(message) = &case.expected_error_message {
            let e = result.expect_err(&what);
            assert!(e.to_string().contains(message.as_str()), "{what}: {e}");
            continue;
        }
        let changed = result.unwrap_or_else(|e| panic!("{what}: {e}"));
        let patch = argocd_lua::merge_patch(&object, &changed);
        assert!(patch.get("status").is_none(), "{what} edits no status");
        let mut applied = object.clone();
        json_patch::merge(&mut applied, &patch);
        let expected = yaml(&dir.join(case.expected_output_path.as_deref().unwrap()));
        assert_eq!(applied, expected, "{what}: patch {patch}");
        // The same patch, sent as argocd-server sends it, passes the CRD's validation.
        let name = format!(
            "{}-{}",
            case.action,
            api.list(&Default::default()).await.unwrap().items.len()
        );
        let mut live = creatable(&object);
        live["metadata"]["name"] = json!(name);
        let live: DynamicObject = serde_json::from_value(live).unwrap();
        api.create(&PostParams::default(), &live)
            .await
            .unwrap_or_else(|e| panic!("{what}: the fixture is valid: {e}"));
        let params = PatchParams {
            dry_run: true,
            ..PatchParams::default()
        };
        api.patch(&name, &params, &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("{what}: the API server refused {patch}: {e}"));
    }
}

/// The `argocd-cm` entries for these scripts, as Argo CD reads them.
fn argocd_cm_data() -> serde_json::Map<String, Value> {
    let dir = customization();
    let actions = dir.join("actions");
    let mut names: Vec<String> = std::fs::read_dir(&actions)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("action.lua").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let definitions: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "action.lua": read(&actions.join(n).join("action.lua"))}))
        .collect();
    let actions_yaml = serde_yaml_ng::to_string(&json!({
        "discovery.lua": read(&actions.join("discovery.lua")),
        "definitions": definitions,
    }))
    .unwrap();
    let mut data = serde_json::Map::new();
    data.insert(
        "resource.customizations.health.infra.argocd.io_Terraform".into(),
        json!(read(&dir.join("health.lua"))),
    );
    data.insert(
        "resource.customizations.actions.infra.argocd.io_Terraform".into(),
        json!(actions_yaml),
    );
    data
}

/// Fails when `path` is not `generated` (`TFOPS_UPDATE_ARGOCD=1` rewrites it first).
fn assert_generated(path: &Path, generated: &str) {
    if std::env::var_os("TFOPS_UPDATE_ARGOCD").is_some() {
        std::fs::write(path, generated).unwrap();
    }
    assert!(
        read(path) == generated,
        "{} is stale: run TFOPS_UPDATE_ARGOCD=1 cargo test -p tests --test argocd_lua",
        path.display()
    );
}

#[test]
fn the_shipped_argocd_cm_entries_are_these_scripts() {
    let data = argocd_cm_data();
    let header = "# Generated from resource_customizations/ by tests/tests/argocd_lua.rs \
                  (TFOPS_UPDATE_ARGOCD=1 rewrites it): do not edit.\n";
    let patch = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": "argocd"},
        "data": data,
    });
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/argocd");
    assert_generated(
        &config.join("argocd-cm.yaml"),
        &format!("{header}{}", serde_yaml_ng::to_string(&patch).unwrap()),
    );
    // The extension through the chart's own installer settings (server.extensions).
    let values = json!({
        "configs": {"cm": data},
        "server": {"extensions": {
            "enabled": true,
            "extensionList": [{
                "name": "extension-tfops",
                "env": [{"name": "EXTENSION_URL", "value": EXTENSION_URL}],
            }],
        }},
    });
    assert_generated(
        &config.join("argo-cd-chart-values.yaml"),
        &format!(
            "{header}# Values for Argo CD's own Helm chart (argo/argo-cd): `helm upgrade argocd argo/argo-cd -f this-file`.\n{}",
            serde_yaml_ng::to_string(&values).unwrap()
        ),
    );
    // The component, applied to an Argo CD install, puts them into argocd-cm, and what
    // Argo CD reads back is what the tests above ran.
    let overlay = tempfile::tempdir().unwrap();
    let root = overlay.path().canonicalize().unwrap();
    std::fs::write(
        root.join("argocd-cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\ndata:\n  url: https://argocd.example.com\n",
    )
    .unwrap();
    std::fs::write(
        root.join("argocd-server.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: argocd-server\n  namespace: argocd\nspec:\n  template:\n    spec:\n      containers:\n        - name: argocd-server\n          image: quay.io/argoproj/argocd:v3.2.0\n",
    )
    .unwrap();
    std::fs::write(
        root.join("kustomization.yaml"),
        format!(
            "resources:\n  - argocd-cm.yaml\n  - argocd-server.yaml\ncomponents:\n  - {}\n",
            support::kustomize_path(&root, &config)
        ),
    )
    .unwrap();
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", root.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_slice(&out.stdout)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let rendered = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .unwrap()
        .clone();
    let server = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let pod = &server["spec"]["template"]["spec"];
    assert_eq!(pod["initContainers"][0]["name"], "extension-tfops");
    assert_eq!(pod["initContainers"][0]["env"][0]["value"], EXTENSION_URL);
    assert_eq!(
        pod["containers"][0]["image"], "quay.io/argoproj/argocd:v3.2.0",
        "kept"
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/tmp/extensions/"
    );
    assert_eq!(
        rendered["data"]["url"], "https://argocd.example.com",
        "kept"
    );
    let actions: Value = serde_yaml_ng::from_str(
        rendered["data"]["resource.customizations.actions.infra.argocd.io_Terraform"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        actions["discovery.lua"].as_str().unwrap(),
        read(&customization().join("actions/discovery.lua"))
    );
    let approve = actions["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "approve")
        .unwrap();
    let lua = argocd_lua::runtime(NOW).unwrap();
    let object = yaml(&customization().join("actions/testdata/awaiting-approval.yaml"));
    let changed =
        argocd_lua::action(&lua, approve["action.lua"].as_str().unwrap(), &object).unwrap();
    assert_eq!(
        changed["metadata"]["annotations"]["infra.argocd.io/approve"],
        "plan-main-9d8e7f6a5b@2026-12-01T12:00:00Z"
    );
    assert_eq!(
        rendered["data"]["resource.customizations.health.infra.argocd.io_Terraform"]
            .as_str()
            .unwrap(),
        read(&customization().join("health.lua"))
    );
}
