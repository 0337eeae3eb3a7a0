//! The Argo CD health and action scripts of `config/argocd/resource_customizations/` run in
//! Argo CD's own Lua runtime (`tests::argocd_lua`: Argo CD's `util/lua`, gopher-lua), on every
//! case of their `health_test.yaml` and `actions/action_test.yaml` (Argo CD's own test
//! format), both as tfops ships them (an `argocd-cm` customization: no `string`, no `math`)
//! and with `useOpenLibs`. The health cases also go through
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
use tests::argocd_lua::{self, ArgoLua, Libraries, OfferedAction};

/// Where the extension's tarball is published (also in `argocd-server-extension.yaml`).
const EXTENSION_URL: &str =
    "https://github.com/tfops/tfops/releases/download/v0.1.0/extension-tfops.tar.gz";

/// The time the action tests' expected outputs name where an action writes the time.
const FIXTURE_TIME: &str = "2026-12-01T12:00:00Z";

/// Both ways Argo CD runs a customization's scripts.
const BOTH: [Libraries; 2] = [Libraries::Customization, Libraries::Open];

/// `value` with every time an action wrote (an RFC 3339 UTC second between `before` and
/// `after`, Argo CD's `os.date("!%Y-%m-%dT%H:%M:%SZ")`) replaced by [`FIXTURE_TIME`]; a time
/// outside that window stays and fails the comparison.
fn at_fixture_time(value: &Value, before: jiff::Timestamp, after: jiff::Timestamp) -> Value {
    let stamp = regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z").unwrap();
    let earliest = before.as_second();
    match value {
        Value::String(s) => Value::String(
            stamp
                .replace_all(s, |c: &regex::Captures| {
                    let t: jiff::Timestamp = c[0].parse().unwrap();
                    if (earliest..=after.as_second()).contains(&t.as_second()) {
                        FIXTURE_TIME.to_string()
                    } else {
                        c[0].to_string()
                    }
                })
                .into_owned(),
        ),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), at_fixture_time(v, before, after)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|v| at_fixture_time(v, before, after))
                .collect(),
        ),
        other => other.clone(),
    }
}

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
    let mut lua = ArgoLua::start().unwrap();
    let cases: HealthTests = serde_yaml_ng::from_str(&read(&dir.join("health_test.yaml"))).unwrap();
    assert!(cases.tests.len() >= 10);
    let mut statuses = std::collections::BTreeSet::new();
    for case in cases.tests {
        let object = yaml(&dir.join(&case.input_path));
        let want = &case.health_status;
        let mut status = String::new();
        for libraries in BOTH {
            let (s, message) = lua
                .health(libraries, &script, &object)
                .unwrap_or_else(|e| panic!("{} ({libraries:?}): {e}", case.input_path))
                .unwrap_or_else(|| panic!("{}: health.lua returned nil", case.input_path));
            assert_eq!(
                (s.as_str(), message.as_str()),
                (want.status.as_str(), want.message.as_str()),
                "health.lua on {} ({libraries:?})",
                case.input_path
            );
            status = s;
        }
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

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct DiscoveryCase {
    input_path: String,
    result: Vec<Offered>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Offered {
    name: String,
    disabled: bool,
    icon_class: String,
    display_name: String,
    /// The parameters the action takes (Argo CD keeps their names).
    #[serde(default)]
    params: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActionCase {
    action: String,
    input_path: String,
    expected_output_path: Option<String>,
    expected_error_message: Option<String>,
    /// `actionParams`, as Argo CD's action tests give them.
    #[serde(default)]
    parameters: std::collections::BTreeMap<String, String>,
}

fn tests_of_actions() -> ActionTests {
    serde_yaml_ng::from_str(&read(&customization().join("actions/action_test.yaml"))).unwrap()
}

#[test]
fn discovery_offers_each_action_only_when_it_can_act() {
    let dir = customization().join("actions");
    let script = read(&dir.join("discovery.lua"));
    let mut lua = ArgoLua::start().unwrap();
    for (case, libraries) in tests_of_actions()
        .discovery_tests
        .into_iter()
        .flat_map(|c| BOTH.map(|l| (c.clone(), l)))
    {
        let object = yaml(&dir.join(&case.input_path));
        let offered = lua.discover(libraries, &script, &object).unwrap();
        // The parameters each action asks for, as Argo CD's UI will ask for them.
        let params: Vec<Value> = lua
            .discover_json(libraries, &script, &object)
            .unwrap()
            .into_iter()
            .map(|a| a.get("params").cloned().unwrap_or(json!([])))
            .collect();
        let expected_params: Vec<Value> = case.result.iter().map(|o| json!(o.params)).collect();
        assert_eq!(
            params, expected_params,
            "{} ({libraries:?})",
            case.input_path
        );
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
        assert_eq!(
            offered, expected,
            "discovery on {} ({libraries:?})",
            case.input_path
        );
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
    let mut lua = ArgoLua::start().unwrap();
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
        let before = jiff::Timestamp::now();
        let results = BOTH.map(|l| lua.patching_action(l, &script, &object, &case.parameters));
        let after = jiff::Timestamp::now();
        if let Some(message) = &case.expected_error_message {
            for result in results {
                let e = result.expect_err(&what);
                assert!(e.to_string().contains(message.as_str()), "{what}: {e}");
            }
            continue;
        }
        let [customization, open] = results
            .map(|r| at_fixture_time(&r.unwrap_or_else(|e| panic!("{what}: {e}")), before, after));
        assert_eq!(customization, open, "{what}: the same with open libraries");
        let changed = customization;
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
    let mut lua = ArgoLua::start().unwrap();
    let object = yaml(&customization().join("actions/testdata/awaiting-approval.yaml"));
    let before = jiff::Timestamp::now();
    let changed = lua
        .patching_action(
            Libraries::Customization,
            approve["action.lua"].as_str().unwrap(),
            &object,
            &Default::default(),
        )
        .unwrap();
    let changed = at_fixture_time(&changed, before, jiff::Timestamp::now());
    assert_eq!(
        changed["metadata"]["annotations"]["infra.argocd.io/approve"],
        format!("plan-main-9d8e7f6a5b@{FIXTURE_TIME}")
    );
    assert_eq!(
        rendered["data"]["resource.customizations.health.infra.argocd.io_Terraform"]
            .as_str()
            .unwrap(),
        read(&customization().join("health.lua"))
    );
}

/// What the scripts may rely on in Argo CD's runtime, and what they may not: the facts the
/// scripts above were written against, asked of Argo CD's own code.
#[test]
fn the_runtime_is_argo_cds_own() {
    let mut lua = ArgoLua::start().unwrap();
    let object = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a"}});
    let mut health = |libraries, script: &str| {
        lua.health(libraries, script, &object)
            .map(|h| h.map(|(status, message)| format!("{status}: {message}")))
    };
    let probe = "local safe = require('os') return {status = 'Healthy', message = \
                 tostring(string == nil) .. ' ' .. tostring(math == nil) .. ' ' .. \
                 tostring(os == nil) .. ' ' .. type(safe.time()) .. ' ' .. \
                 tostring(safe.execute == nil)}";
    // Shipped as a customization: no string, no math, not even a global os (Argo CD opens its
    // safe os under another name); `require("os")` gives the safe one: time and date only.
    assert_eq!(
        health(Libraries::Customization, probe).unwrap().unwrap(),
        "Healthy: true true true number true"
    );
    assert_eq!(
        health(Libraries::Open, probe).unwrap().unwrap(),
        "Healthy: false false false number true"
    );
    // A status Argo CD does not know becomes Unknown; nil leaves the health to Argo CD.
    assert_eq!(
        health(Libraries::Customization, "return {status = 'Fine'}")
            .unwrap()
            .unwrap(),
        "Unknown: Lua returned an invalid health status"
    );
    assert_eq!(
        health(Libraries::Customization, "return nil").unwrap(),
        None
    );
    // Each call is a fresh state: a global set by one run is gone in the next.
    health(Libraries::Customization, "leaked = 1 return nil").unwrap();
    assert_eq!(
        health(
            Libraries::Customization,
            "return {status = 'Healthy', message = tostring(leaked)}"
        )
        .unwrap()
        .unwrap(),
        "Healthy: nil"
    );
    // A script that never ends is stopped (Argo CD allows 1 s).
    let e = health(Libraries::Customization, "while true do end").unwrap_err();
    assert!(e.to_string().contains("context deadline exceeded"), "{e}");
    // A raised error reaches the user without a Lua traceback.
    let e = health(Libraries::Customization, "error('no plan')").unwrap_err();
    assert!(e.to_string().contains("no plan"), "{e}");
    assert!(!e.to_string().contains("stack traceback"), "{e}");
}
