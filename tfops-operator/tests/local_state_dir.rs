//! One state directory, one command at a time: a second `tfops local` command that would
//! change it stops with a message naming the first, and the first loses nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{terraform, tfops};

#[test]
fn a_second_command_on_a_busy_state_directory_names_the_first_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("infra")).unwrap();
    let started = dir.path().join("started");
    std::fs::write(
        dir.path().join("infra/main.tf"),
        format!(
            "resource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"touch {} && sleep 4\"\n  }}\n}}\n",
            started.display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("terraform.yaml"),
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: app\n  namespace: demo\nspec:\n  sourceRef:\n    kind: Local\n    url: ./infra\n  approvePlan: auto\n",
    )
    .unwrap();
    let first = Command::new(env!("CARGO_BIN_EXE_tfops"))
        .args(["local", "apply", "-f", "terraform.yaml"])
        .current_dir(dir.path())
        .env("TFOPS_TERRAFORM", terraform())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first command's apply to be under way.
    for _ in 0..600 {
        if started.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(started.exists(), "the first apply started");

    let second = tfops(dir.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(second.code, 2, "{}{}", second.stdout, second.stderr);
    assert!(
        second.stderr.contains("in use by another tfops command")
            && second.stderr.contains(&format!("pid {}", first.id()))
            && second.stderr.contains("tfops local apply"),
        "{}",
        second.stderr
    );

    let first = first.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&first.stdout);
    assert_eq!(first.status.code(), Some(0), "{out}");
    assert!(out.contains("TerraformAppliedSucceed"), "{out}");
    // Once it is done the directory is free again.
    let again = tfops(dir.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
}
