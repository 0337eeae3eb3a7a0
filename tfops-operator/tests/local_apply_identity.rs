//! `spec.runner.apply` in `tfops local`, with a real terraform: plans run in a runner process
//! with the runner's environment, the apply in a second one with the apply part merged over
//! it, and status says which ran what.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::tfops;

/// A project whose resource, when created, writes the runner's `WRITE_TOKEN` (and fails
/// without one) into `written.txt`.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("infra")).unwrap();
    let written = dir.path().join("written.txt");
    let config = format!(
        "resource \"terraform_data\" \"w\" {{\n  input = \"x\"\n  provisioner \"local-exec\" {{\n    command = \"test -n \\\"$WRITE_TOKEN\\\" && printf '%s:%s' \\\"$READ_TOKEN\\\" \\\"$WRITE_TOKEN\\\" > {}\"\n  }}\n}}\n",
        written.display()
    );
    std::fs::write(dir.path().join("infra/main.tf"), config).unwrap();
    let yaml = "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: app\n  namespace: demo\nspec:\n  approvePlan: auto\n  sourceRef:\n    kind: Local\n    url: ./infra\n  runner:\n    podTemplate:\n      spec:\n        env:\n          - name: READ_TOKEN\n            value: reader\n    apply:\n      podTemplate:\n        spec:\n          env:\n            - name: WRITE_TOKEN\n              value: writer\n";
    std::fs::write(dir.path().join("terraform.yaml"), yaml).unwrap();
    dir
}

fn status(dir: &Path) -> serde_json::Value {
    let out = tfops(dir, &["local", "status", "app", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    v[0]["status"].clone()
}

#[test]
fn the_apply_runs_in_its_own_runner_with_the_apply_environment() {
    let p = project();
    let run = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    // The apply runner has both parts' variables; the plan runner never had the writer's.
    assert_eq!(
        std::fs::read_to_string(p.path().join("written.txt")).unwrap(),
        "reader:writer"
    );
    let s = status(p.path());
    assert_eq!(s["lastPlannedBy"], "local:plan", "{s}");
    assert_eq!(s["lastAppliedBy"], "local:apply", "{s}");

    // Without the apply part, the one runner lacks WRITE_TOKEN and the apply fails.
    let yaml = std::fs::read_to_string(p.path().join("terraform.yaml")).unwrap();
    let cut = yaml.find("    apply:").unwrap();
    std::fs::write(p.path().join("terraform.yaml"), &yaml[..cut]).unwrap();
    std::fs::remove_file(p.path().join("written.txt")).unwrap();
    let history = tfops(p.path(), &["local", "destroy", "app"]);
    assert_eq!(history.code, 0, "{}{}", history.stdout, history.stderr);
    let run = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_ne!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("TFExecApplyFailed"), "{}", run.stdout);
    assert!(!p.path().join("written.txt").exists());
}
