//! Approvals in `tfops local` with real Terraform and OpenTofu: what is approved is what is applied, and
//! an approval counts once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::{Binary, tfops, tfops_with};
use test_case::test_case;

/// A project whose one resource reads `outside.txt`, a file that is not part of the source.
fn project(vars: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("infra")).unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "first").unwrap();
    let config = format!(
        "variable \"n\" {{\n  type = number\n}}\nresource \"terraform_data\" \"f\" {{\n  input = \"${{var.n}}:${{file({:?})}}\"\n}}\noutput \"f\" {{\n  value = terraform_data.f.output\n}}\n",
        outside.display().to_string()
    );
    std::fs::write(dir.path().join("infra/main.tf"), config).unwrap();
    write_manifest(dir.path(), vars);
    dir
}

fn write_manifest(dir: &Path, n: &str) {
    let yaml = format!(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: app\n  namespace: demo\nspec:\n  sourceRef:\n    kind: Local\n    url: ./infra\n  vars:\n    - name: n\n      value: {n}\n  writeOutputsToSecret:\n    name: app-out\n"
    );
    std::fs::write(dir.join("terraform.yaml"), yaml).unwrap();
}

fn pending(dir: &Path) -> String {
    let status = tfops(dir, &["local", "status", "app", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    v[0]["status"]["plan"]["pending"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn output(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(".tfops/objects/demo/app/outputs.json")).unwrap_or_default()
}

/// A reported approval bug: approve and apply; edit a variable (a new plan under the same id); `apply`
/// again without approving: nothing is applied.
#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
fn regression_an_approval_is_not_reused_by_the_next_plan(binary: Binary) {
    let p = project("1");
    let first = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(first.code, 1, "{}{}", first.stdout, first.stderr);
    let id = pending(p.path());
    let approved = tfops_with(binary, p.path(), &["local", "approve", "app"]);
    assert_eq!(approved.code, 0, "{}{}", approved.stdout, approved.stderr);
    assert!(output(p.path()).contains("1:first"));

    write_manifest(p.path(), "2");
    let replanned = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(
        replanned.code, 1,
        "{}{}",
        replanned.stdout, replanned.stderr
    );
    assert_eq!(pending(p.path()), id, "same revision, same plan id");
    let again = tfops_with(binary, p.path(), &["local", "apply"]);
    assert_eq!(again.code, 1, "{}{}", again.stdout, again.stderr);
    assert!(
        !again.stdout.contains("TerraformAppliedSucceed"),
        "applied without approval: {}",
        again.stdout
    );
    assert!(again.stdout.contains("does not count"), "{}", again.stdout);
    assert!(output(p.path()).contains("1:first"), "nothing was applied");

    let approved = tfops_with(binary, p.path(), &["local", "approve", "app", &id]);
    assert_eq!(approved.code, 0, "{}{}", approved.stdout, approved.stderr);
    assert!(output(p.path()).contains("2:first"));
}

/// The plan re-made before applying reads a file outside the source that changed after the
/// approval: nothing is applied, and the new plan is pending with a message saying why.
#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
fn a_plan_that_changed_since_its_approval_is_not_applied(binary: Binary) {
    let p = project("1");
    let first = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(first.code, 1, "{}{}", first.stdout, first.stderr);

    std::fs::write(p.path().join("outside.txt"), "second").unwrap();
    let approved = tfops_with(binary, p.path(), &["local", "approve", "app"]);
    assert_eq!(approved.code, 1, "{}{}", approved.stdout, approved.stderr);
    assert!(
        approved.stdout.contains("changed since it was approved"),
        "{}",
        approved.stdout
    );
    assert!(!approved.stdout.contains("TerraformAppliedSucceed"));
    assert_eq!(output(p.path()), "", "nothing was applied");
    let show = tfops_with(binary, p.path(), &["local", "plan", "show", "app"]);
    assert!(
        show.stdout.contains("second"),
        "the new plan is stored: {}",
        show.stdout
    );

    let approved = tfops_with(binary, p.path(), &["local", "approve", "app"]);
    assert_eq!(approved.code, 0, "{}{}", approved.stdout, approved.stderr);
    assert!(
        output(p.path()).contains("1:second"),
        "{}",
        output(p.path())
    );
}
