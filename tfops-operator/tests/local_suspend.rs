//! `tfops local` honours the suspend annotation as the controller does: an object annotated
//! `infra.argocd.io/suspend` runs nothing and says why; without it, it applies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::tfops;

fn manifest(annotation: &str) -> String {
    format!(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: app\n  namespace: demo\n{annotation}spec:\n  approvePlan: auto\n  sourceRef:\n    kind: Local\n    url: ./infra\n  writeOutputsToSecret:\n    name: app-out\n"
    )
}

#[test]
fn the_suspend_annotation_stops_a_local_run_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("infra")).unwrap();
    std::fs::write(
        dir.path().join("infra/main.tf"),
        "resource \"terraform_data\" \"x\" {\n  input = \"a\"\n}\noutput \"x\" {\n  value = terraform_data.x.output\n}\n",
    )
    .unwrap();
    let file = dir.path().join("terraform.yaml");
    std::fs::write(
        &file,
        manifest("  annotations:\n    infra.argocd.io/suspend: change freeze\n"),
    )
    .unwrap();
    let run = tfops(dir.path(), &["local", "apply", "-f", "terraform.yaml"]);
    let said = format!("{}{}", run.stdout, run.stderr);
    assert!(
        said.contains("reconciliation is suspended (infra.argocd.io/suspend: change freeze)"),
        "{said}"
    );
    let outputs = dir.path().join(".tfops/objects/demo/app/outputs.json");
    assert!(!outputs.exists(), "nothing applied: {said}");

    std::fs::write(&file, manifest("")).unwrap();
    let run = tfops(dir.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(std::fs::read_to_string(&outputs).unwrap().contains("\"a\""));
}
