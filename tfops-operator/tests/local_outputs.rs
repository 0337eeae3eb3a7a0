//! Outputs in local mode, with a real terraform through the real runner: the outputs Secret
//! in `outputs.json` (0600) and the outputs not marked sensitive in `outputs-configmap.json`;
//! a sensitive output asked for in the ConfigMap fails the run naming it; renaming either
//! keeps the file (written under the new name), removing the ConfigMap removes its file, and
//! `destroy` forgets both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::tfops;
use serde_json::json;

const CONFIG: &str = r#"
resource "terraform_data" "a" {
  input = "a-1"
}
output "a" {
  value = terraform_data.a.output
}
output "sizes" {
  value = [1, 2]
}
output "token" {
  value     = "s3cr3t"
  sensitive = true
}
"#;

fn manifest(dir: &Path, outputs: &str) {
    let yaml = format!(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: app\n  namespace: demo\nspec:\n  sourceRef:\n    kind: Local\n    url: ./infra\n  approvePlan: auto\n{outputs}"
    );
    std::fs::write(dir.join("terraform.yaml"), yaml).unwrap();
}

fn read(path: &Path) -> Option<serde_json::Value> {
    let bytes = std::fs::read(path).ok()?;
    Some(serde_json::from_slice(&bytes).unwrap())
}

#[test]
fn outputs_not_sensitive_go_to_the_config_map_file_and_a_sensitive_one_is_refused() {
    let p = tempfile::tempdir().unwrap();
    std::fs::create_dir(p.path().join("infra")).unwrap();
    std::fs::write(p.path().join("infra/main.tf"), CONFIG).unwrap();
    let objects = p.path().join(".tfops/objects/demo/app");
    let (secret, config_map) = (
        objects.join("outputs.json"),
        objects.join("outputs-configmap.json"),
    );
    let apply = || tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);

    manifest(
        p.path(),
        "  writeOutputsToSecret:\n    name: app-out\n  writeOutputsToConfigMap:\n    name: app-values\n    labels:\n      team: a\n",
    );
    let first = apply();
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    let map = read(&config_map).expect("outputs-configmap.json");
    assert_eq!(
        map,
        json!({"name": "app-values", "labels": {"team": "a"}, "annotations": {},
               "data": {"a": "a-1", "sizes": "[1,2]"}})
    );
    assert_eq!(
        std::fs::metadata(&config_map).unwrap().permissions().mode() & 0o777,
        0o644,
        "nothing secret in it"
    );
    assert_eq!(read(&secret).unwrap()["data"]["token"], "s3cr3t");

    manifest(
        p.path(),
        "  writeOutputsToConfigMap:\n    name: app-values\n    outputs: [a, token]\n",
    );
    let refused = apply();
    assert_eq!(refused.code, 1, "{}{}", refused.stdout, refused.stderr);
    let said = format!("{}{}", refused.stdout, refused.stderr);
    assert!(
        said.contains("OutputsWritingFailed")
            && said.contains(r#"output "token" is marked sensitive by Terraform"#),
        "{said}"
    );
    assert_eq!(read(&config_map), Some(map), "unchanged");

    // Both renamed: each file holds what was written under the new name.
    manifest(
        p.path(),
        "  writeOutputsToSecret:\n    name: app-secret\n  writeOutputsToConfigMap:\n    name: app-cfg\n    outputs: [\"a:first\"]\n",
    );
    let renamed = apply();
    assert_eq!(renamed.code, 0, "{}{}", renamed.stdout, renamed.stderr);
    let map = read(&config_map).expect("the renamed ConfigMap's file");
    assert_eq!(
        (&map["name"], &map["data"]),
        (&json!("app-cfg"), &json!({"first": "a-1"}))
    );
    assert_eq!(
        read(&secret).expect("the renamed Secret's file")["name"],
        "app-secret"
    );

    manifest(p.path(), "  writeOutputsToSecret:\n    name: app-secret\n");
    let removed = apply();
    assert_eq!(removed.code, 0, "{}{}", removed.stdout, removed.stderr);
    assert!(
        !config_map.exists(),
        "no ConfigMap asked for: its file goes"
    );
    assert!(secret.exists());

    manifest(
        p.path(),
        "  writeOutputsToSecret:\n    name: app-secret\n  writeOutputsToConfigMap:\n    name: app-cfg\n",
    );
    assert_eq!(apply().code, 0);
    assert!(config_map.exists());
    let destroyed = tfops(p.path(), &["local", "destroy", "app"]);
    assert_eq!(
        destroyed.code, 0,
        "{}{}",
        destroyed.stdout, destroyed.stderr
    );
    assert!(
        !config_map.exists() && !secret.exists(),
        "destroy forgets both"
    );
}
