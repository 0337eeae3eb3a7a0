//! The starter policies of `examples/policies/` against plans made by real Terraform and by
//! OpenTofu.
//!
//! For every `configs/<case>/`, the binary (with this crate's stand-in provider from a
//! filesystem mirror) applies `before.tf` when there is one, then plans `after.tf`; `show
//! -json` of that plan must describe the same changes as the committed
//! `fixtures/<case>.plan.json`, and the cases of `starter.test.yaml` must hold on the fresh
//! plans as on the committed ones. `TFOPS_UPDATE_FIXTURES=1 cargo test -p
//! tfops-fixture-provider` rewrites the fixtures from Terraform's plans.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary named `name` (`terraform`, `tofu`), found as the runner finds it.
fn program(name: &str) -> PathBuf {
    tfops_runner::server::find_binary(name)
        .map(|(_, path)| path)
        .unwrap_or_else(|| {
            panic!("no {name}: run scripts/install-terraform and scripts/install-tofu and set TFOPS_TERRAFORM and TFOPS_TOFU")
        })
}

fn policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies")
}

/// A CLI configuration that installs `tfops.local/fixtures/aws` from a mirror holding this
/// crate's provider binary, and nothing from the network.
fn cli_config(root: &Path) -> PathBuf {
    let dir = root.join("mirror/tfops.local/fixtures/aws/1.0.0/linux_amd64");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_terraform-provider-aws"),
        dir.join("terraform-provider-aws_v1.0.0"),
    )
    .unwrap();
    let config = root.join("cli.tfrc");
    std::fs::write(
        &config,
        format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path = {:?}\n    include = [\"tfops.local/*/*\"]\n  }}\n}}\n",
            root.join("mirror").display().to_string()
        ),
    )
    .unwrap();
    config
}

const VERSIONS: &str = r#"terraform {
  required_providers {
    aws = { source = "tfops.local/fixtures/aws" }
  }
}
"#;

fn run(binary: &Path, work: &Path, config: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(binary)
        .args(args)
        .current_dir(work)
        .env("TF_CLI_CONFIG_FILE", config)
        .env("TF_IN_AUTOMATION", "1")
        .env_remove("TF_PLUGIN_CACHE_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?} in {}: {}{}",
        binary.display(),
        work.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `show -json` of the plan from `before.tf` (applied) to `after.tf`.
fn plan_case(binary: &Path, case: &Path, root: &Path, config: &Path) -> serde_json::Value {
    let work = root.join(case.file_name().unwrap());
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("versions.tf"), VERSIONS).unwrap();
    let before = case.join("before.tf");
    if before.is_file() {
        std::fs::copy(&before, work.join("main.tf")).unwrap();
        run(
            binary,
            &work,
            config,
            &["init", "-input=false", "-no-color"],
        );
        run(
            binary,
            &work,
            config,
            &["apply", "-auto-approve", "-input=false", "-no-color"],
        );
    }
    std::fs::copy(case.join("after.tf"), work.join("main.tf")).unwrap();
    run(
        binary,
        &work,
        config,
        &["init", "-input=false", "-no-color"],
    );
    run(
        binary,
        &work,
        config,
        &["plan", "-out=plan.bin", "-input=false", "-no-color"],
    );
    serde_json::from_slice(&run(binary, &work, config, &["show", "-json", "plan.bin"])).unwrap()
}

/// What a plan does, without what differs between runs (timestamps, state serials).
fn changes(plan: &serde_json::Value) -> Vec<(String, serde_json::Value, serde_json::Value)> {
    plan["resource_changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["address"].as_str().unwrap().to_string(),
                c["change"]["actions"].clone(),
                c["change"]["after"].clone(),
            )
        })
        .collect()
}

fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(policies_dir().join("configs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("after.tf").is_file())
        .collect();
    cases.sort();
    cases
}

#[test_case::test_case("terraform" ; "terraform")]
#[test_case::test_case("tofu" ; "tofu")]
fn fixtures_are_what_each_binary_plans_and_the_starter_policies_hold_on_them(name: &str) {
    let binary = program(name);
    let root = tempfile::tempdir().unwrap();
    let config = cli_config(root.path());
    // The committed fixtures are Terraform's; OpenTofu must plan the same changes.
    let update = std::env::var_os("TFOPS_UPDATE_FIXTURES").is_some() && name == "terraform";
    // A copy of the policies and test cases, with the fresh plans as fixtures.
    let fresh = root.path().join("policies");
    std::fs::create_dir_all(fresh.join("fixtures")).unwrap();
    for entry in std::fs::read_dir(policies_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            std::fs::copy(&path, fresh.join(path.file_name().unwrap())).unwrap();
        }
    }
    let cases = cases();
    assert!(cases.len() >= 6, "the starter set has its cases");
    for case in &cases {
        let case_name = case.file_name().unwrap().to_string_lossy().into_owned();
        let plan = plan_case(&binary, case, &root.path().join("work"), &config);
        let file = format!("{case_name}.plan.json");
        let text = serde_json::to_string_pretty(&plan).unwrap() + "\n";
        std::fs::write(fresh.join("fixtures").join(&file), &text).unwrap();
        let committed = policies_dir().join("fixtures").join(&file);
        if update {
            std::fs::write(&committed, &text).unwrap();
            continue;
        }
        let committed: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&committed)
                .unwrap_or_else(|e| panic!("{}: {e}", committed.display())),
        )
        .unwrap();
        assert_eq!(
            changes(&plan),
            changes(&committed),
            "{case_name}: the committed fixture is not what {name} plans now \
             (TFOPS_UPDATE_FIXTURES=1 rewrites it from Terraform's plan)"
        );
    }
    for dir in [fresh.as_path(), policies_dir().as_path()] {
        let checked = tfops_operator::policy_test::run(dir).unwrap();
        assert!(
            checked.len() >= 5 * cases.len(),
            "every rule is expected in every case"
        );
        let failed: Vec<_> = checked.iter().filter(|c| !c.ok()).collect();
        assert!(failed.is_empty(), "{}: {failed:#?}", dir.display());
    }
}
