//! The `tfops local` command line end to end, with a real terraform through the real runner.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

use common::{Binary, terraform, tfops, tfops_with};
use test_case::test_case;

const CONFIG: &str = r#"
variable "n" {
  type    = number
  default = 1
}
data "terraform_remote_state" "upstream" {
  backend = "local"
  config = { path = "UPSTREAM" }
}
resource "terraform_data" "a" {
  input = "a-${var.n}"
}
output "a" {
  value = terraform_data.a.output
}
output "upstream_color" {
  value = data.terraform_remote_state.upstream.outputs.color
}
"#;

fn upstream(dir: &Path, color: &str, serial: u32) {
    std::fs::write(
        dir.join("upstream.tfstate"),
        format!(r#"{{"version":4,"terraform_version":"1.5.0","serial":{serial},"lineage":"00000000-0000-0000-0000-000000000000","outputs":{{"color":{{"value":"{color}","type":"string"}}}},"resources":[],"check_results":null}}"#),
    )
    .unwrap();
}

fn object(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: {name}\n  namespace: demo\nspec:\n  sourceRef:\n    kind: Local\n    url: ./infra\n{extra}"
    )
}

fn project(yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("infra")).unwrap();
    // The runner works on an extracted copy of ./infra: the upstream state is named absolutely.
    let upstream_path = dir.path().join("upstream.tfstate").display().to_string();
    std::fs::write(
        dir.path().join("infra/main.tf"),
        CONFIG.replace("UPSTREAM", &upstream_path),
    )
    .unwrap();
    upstream(dir.path(), "blue", 1);
    std::fs::write(dir.path().join("terraform.yaml"), yaml).unwrap();
    dir
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
fn apply_then_apply_again_changes_nothing(binary: Binary) {
    let p = project(&object(
        "app",
        "  approvePlan: auto\n  writeOutputsToSecret:\n    name: app-out\n",
    ));
    let first = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    assert!(first.stdout.contains("plan: +1 ~0 -0"), "{}", first.stdout);
    assert!(first.stdout.contains("TerraformAppliedSucceed"));
    let outputs = p.path().join(".tfops/objects/demo/app/outputs.json");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&outputs).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(std::fs::read_to_string(&outputs).unwrap().contains("a-1"));

    let second = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(second.code, 0, "{}{}", second.stdout, second.stderr);
    assert!(
        second.stdout.contains("drift check: no drift"),
        "{}",
        second.stdout
    );
    assert!(
        !second.stdout.contains("  apply"),
        "no second apply: {}",
        second.stdout
    );

    let status = tfops_with(binary, p.path(), &["local", "status", "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(v[0]["reason"], "NoDrift");
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
fn a_plan_waits_for_approval_and_stale_ids_are_refused(binary: Binary) {
    let p = project(&object("app", ""));
    let first = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(
        first.code, 1,
        "not Ready while waiting: {}{}",
        first.stdout, first.stderr
    );
    assert!(first.stdout.contains("awaits approval"), "{}", first.stdout);
    let status = tfops_with(
        binary,
        p.path(),
        &["local", "status", "app", "--output", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let pending = v[0]["status"]["plan"]["pending"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pending.starts_with("plan-local-"), "{pending}");
    assert!(
        first.stdout.contains(&pending),
        "the id to approve is printed"
    );

    let show = tfops_with(binary, p.path(), &["local", "plan", "show", "app"]);
    assert!(
        show.stdout.contains("terraform_data.a will be created"),
        "{}",
        show.stdout
    );

    let stale = tfops_with(
        binary,
        p.path(),
        &["local", "approve", "app", "plan-local-0000000000"],
    );
    assert_eq!(stale.code, 2);
    assert!(stale.stderr.contains("is stale"), "{}", stale.stderr);

    let approved = tfops_with(binary, p.path(), &["local", "approve", "app", &pending]);
    assert_eq!(approved.code, 0, "{}{}", approved.stdout, approved.stderr);
    assert!(
        approved.stdout.contains("TerraformAppliedSucceed"),
        "{}",
        approved.stdout
    );
}

#[test]
fn dependencies_run_first_and_a_cycle_is_named() {
    let yaml = format!(
        "{}  approvePlan: auto\n  dependsOn:\n    - name: net\n---\n{}  approvePlan: auto\n",
        object("app", ""),
        object("net", "")
    );
    let p = project(&yaml);
    let out = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let net = out.stdout.find("● demo/net").unwrap();
    let app = out.stdout.find("● demo/app").unwrap();
    assert!(net < app, "net before app: {}", out.stdout);

    let cycle = format!(
        "{}  dependsOn:\n    - name: b\n---\n{}  dependsOn:\n    - name: a\n",
        object("a", ""),
        object("b", "")
    );
    let p = project(&cycle);
    let out = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("dependsOn forms a cycle: demo/a -> demo/b -> demo/a"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_input_gets_a_clear_message() {
    let p = project(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: x\nspec:\n  sourceRef: [unclosed\n",
    );
    let out = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("line 6"), "{}", out.stderr);

    let p = project(&object("x", "  aproovePlan: auto\n"));
    let out = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("aproovePlan"), "{}", out.stderr);

    let p = project(&object("x", "  interval: often\n  parallelism: -1\n"));
    let out = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("InvalidSpec")
            && out.stdout.contains("spec.interval")
            && out.stdout.contains("spec.parallelism"),
        "{}",
        out.stdout
    );

    let p = project(&object("x", "  approvePlan: auto\n").replace("./infra", "./nowhere"));
    let out = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("SourceNotFound") && out.stdout.contains("does not exist"),
        "{}",
        out.stdout
    );

    let p = project(&object("x", "  approvePlan: auto\n"));
    let out = tfops(
        p.path(),
        &[
            "local",
            "apply",
            "-f",
            "terraform.yaml",
            "--state-dir",
            "/proc/nope",
        ],
    );
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("state directory"), "{}", out.stderr);

    let out = Command::new(env!("CARGO_BIN_EXE_tfops"))
        .args(["local", "apply", "-f", "terraform.yaml"])
        .current_dir(p.path())
        .env_remove("TFOPS_TERRAFORM")
        .env_remove("TFOPS_TOFU")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("scripts/install-terraform"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A TFOPS_TERRAFORM that names nothing is said plainly, with the path looked at.
    let out = Command::new(env!("CARGO_BIN_EXE_tfops"))
        .args(["local", "apply", "-f", "terraform.yaml"])
        .current_dir(p.path())
        .env("TFOPS_TERRAFORM", "/nonexistent/terraform")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("TFOPS_TERRAFORM is /nonexistent/terraform"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tfops"))
        .args(["local", "apply", "-f", "terraform.yaml", "--binary", "tofu"])
        .current_dir(p.path())
        .env("TFOPS_TOFU", "/nonexistent/tofu")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("TFOPS_TOFU is /nonexistent/tofu"),
        "{stderr}"
    );
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
fn drift_is_detected_and_corrected_in_auto_mode_then_destroy_removes_everything(binary: Binary) {
    let p = project(&object("app", "  approvePlan: auto\n"));
    assert_eq!(
        tfops_with(
            binary,
            p.path(),
            &["local", "apply", "-f", "terraform.yaml"]
        )
        .code,
        0
    );
    upstream(p.path(), "red", 2);
    let out = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert!(
        out.stdout
            .contains("drift check: drift in output.upstream_color"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.code, 0,
        "re-planned and applied in auto mode: {}{}",
        out.stdout, out.stderr
    );
    let status = tfops_with(
        binary,
        p.path(),
        &["local", "status", "app", "--output", "json"],
    );
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert!(v[0]["status"]["lastDriftDetectedAt"].is_string());

    let out = tfops_with(binary, p.path(), &["local", "destroy", "app"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("destroy") && out.stdout.contains("removed"),
        "{}",
        out.stdout
    );
    let state = std::fs::read_to_string(p.path().join(".tfops/objects/demo/app/terraform.tfstate"))
        .unwrap();
    assert!(
        !state.contains("terraform_data"),
        "resources destroyed, state file kept"
    );
    assert!(
        tfops_with(binary, p.path(), &["local", "status", "--output", "json"])
            .stdout
            .trim()
            == "[]"
    );
}

/// A copy of `examples/hello` in a fresh directory.
fn hello() -> tempfile::TempDir {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    let p = tempfile::tempdir().unwrap();
    for rel in ["terraform.yaml", "infra/main.tf"] {
        let to = p.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(examples.join(rel), to).unwrap();
    }
    p
}

/// The README's first command (`scripts/demo`) runs exactly this reconcile path.
#[test]
fn the_demo_reconciles_examples_hello() {
    let p = hello();
    let first = tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    assert!(first.stdout.contains("plan: +4 ~0 -0"), "{}", first.stdout);
    assert!(
        first.stdout.contains(r#"message="hello, world""#),
        "{}",
        first.stdout
    );
    assert!(
        !first
            .stdout
            .contains("Terraform has been successfully initialized"),
        "Terraform's own output only with --logs: {}",
        first.stdout
    );
    let second = tfops(
        p.path(),
        &["local", "apply", "-f", "terraform.yaml", "--logs"],
    );
    assert_eq!(second.code, 0);
    assert!(second.stdout.contains("NoDrift"), "{}", second.stdout);
    // --logs: Terraform's lines, indented under the step that printed them.
    assert!(
        second
            .stdout
            .contains("    Terraform has been successfully initialized!"),
        "{}",
        second.stdout
    );

    // The run history: the drift check, then the first apply; newest first.
    let history = tfops(p.path(), &["local", "history", "hello"]);
    assert_eq!(history.code, 0, "{}", history.stderr);
    let lines: Vec<&str> = history.stdout.lines().collect();
    assert!(
        lines[0].starts_with('#') && lines[0].contains("TRIGGER"),
        "{}",
        history.stdout
    );
    assert!(
        lines[1].starts_with("1 ") && lines[1].contains("NoDrift"),
        "{}",
        history.stdout
    );
    assert!(
        lines[2].starts_with("2 ")
            && lines[2].contains("+4 ~0 -0")
            && lines[2].contains("Succeeded"),
        "{}",
        history.stdout
    );
    let logs = tfops(p.path(), &["local", "logs", "hello", "--run", "2"]);
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    assert!(
        logs.stdout.contains("Apply complete! Resources: 4 added"),
        "{}",
        logs.stdout
    );
    let past = tfops(p.path(), &["local", "logs", "hello", "--run", "3"]);
    assert_eq!(past.code, 2);
    assert!(
        past.stderr.contains("has 2 recorded run(s)"),
        "{}",
        past.stderr
    );
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
fn watch_interrupted_mid_apply_then_restarted_keeps_state_and_applies_once(binary: Binary) {
    let p = project(&object("app", "  approvePlan: auto\n"));
    // The provisioner marks its start, so the test interrupts an apply under way.
    let started_marker = p.path().join("apply-started");
    let slow = format!(
        "resource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"touch {} && sleep 30\"\n  }}\n}}\n",
        started_marker.display()
    );
    let main = p.path().join("infra/main.tf");
    let config = std::fs::read_to_string(&main).unwrap();
    std::fs::write(&main, format!("{config}\n{slow}")).unwrap();
    let mut watch = Command::new(env!("CARGO_BIN_EXE_tfops"))
        .args(["local", "watch", "-f", "terraform.yaml"])
        .current_dir(p.path())
        .env("TFOPS_BINARY", binary.as_str())
        .env("TFOPS_TERRAFORM", terraform())
        .env("TFOPS_TOFU", common::program(Binary::Tofu))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let waited = std::time::Instant::now();
    while !started_marker.exists() {
        assert!(
            watch.try_wait().unwrap().is_none(),
            "tfops local watch ended before the apply started"
        );
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(120),
            "the apply never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Ctrl-C: tfops stops its runner, which cancels terraform (SIGTERM) so it releases its lock.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = watch.wait_with_output().unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "stopped promptly"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("interrupted"), "{text}");
    assert_ne!(out.status.code(), Some(0));

    // Restarted without the slow resource: the state was not damaged and one apply finishes.
    // The interrupted apply was recorded; its runner stopped with the first command, so its
    // result is unknown and that is said before planning again from the state.
    std::fs::write(&main, config).unwrap();
    let again = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    let said = format!("{}{}", again.stdout, again.stderr);
    assert!(
        said.contains("ApplyInterrupted") && said.contains("its result is unknown"),
        "{said}"
    );
    assert!(
        again.stdout.contains("TerraformAppliedSucceed"),
        "{}",
        again.stdout
    );
}

#[test]
fn replan_plans_even_when_nothing_changed_and_unlock_needs_a_lock() {
    let p = project(&object("app", "  approvePlan: auto\n"));
    assert_eq!(
        tfops(p.path(), &["local", "apply", "-f", "terraform.yaml"]).code,
        0
    );
    let replan = tfops(p.path(), &["local", "replan", "app"]);
    assert_eq!(replan.code, 0, "{}{}", replan.stdout, replan.stderr);
    assert!(
        replan.stdout.contains("plan: no changes"),
        "no drift shortcut: {}",
        replan.stdout
    );
    let unlock = tfops(p.path(), &["local", "unlock", "app"]);
    assert_eq!(unlock.code, 2);
    assert!(
        unlock.stderr.contains("reports no held state lock"),
        "{}",
        unlock.stderr
    );
    let unknown = tfops(p.path(), &["local", "replan", "nope"]);
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains("no Terraform object named nope"),
        "{}",
        unknown.stderr
    );
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
fn a_policy_in_the_manifests_blocks_a_plan_it_denies(binary: Binary) {
    let policy = "apiVersion: infra.argocd.io/v1alpha1\nkind: TerraformPolicy\nmetadata:\n  name: small-changes\n  namespace: demo\nspec:\n  rules:\n    - name: no-creates-of-a\n      scope: Resource\n      expression: \"!(change.address == 'terraform_data.a' && 'create' in change.actions)\"\n      message: a must not be created here\n";
    let yaml = format!("{}  approvePlan: auto\n---\n{policy}", object("app", ""));
    let p = project(&yaml);
    let out = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("ValidationFailed"), "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "small-changes/no-creates-of-a: a must not be created here (terraform_data.a)"
        ),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("  apply"), "{}", out.stdout);

    let broken = format!(
        "{}  approvePlan: auto\n---\n{}",
        object("app", ""),
        policy.replace("change.address", "chnge.address")
    );
    let p = project(&broken);
    let out = tfops_with(
        binary,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(out.code, 2, "a broken policy stops before any run");
    assert!(out.stderr.contains("chnge"), "{}", out.stderr);
}

#[test]
fn policy_eval_prints_each_rule_and_fails_on_deny() {
    let dir = tempfile::tempdir().unwrap();
    let plan = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tfops-core/tests/fixtures/plan-delete-update-create.json");
    let policy = "apiVersion: infra.argocd.io/v1alpha1\nkind: TerraformPolicy\nmetadata: { name: keep-data, namespace: team-a }\nspec:\n  rules:\n    - name: no-db-deletes\n      scope: Resource\n      expression: \"!(change.address.endsWith('.db') && 'delete' in change.actions)\"\n      messageExpression: \"change.address + ' would be deleted'\"\n";
    std::fs::write(dir.path().join("deny.yaml"), policy).unwrap();
    std::fs::write(
        dir.path().join("ok.yaml"),
        policy.replace(".db')", ".nothing')"),
    )
    .unwrap();
    std::fs::write(dir.path().join("notaplan.json"), "[1, 2]").unwrap();
    let plan = plan.to_str().unwrap();
    let run = |policy: &str, plan: &str| {
        let out = tfops(
            dir.path(),
            &["policy", "eval", "--policy", policy, "--plan", plan],
        );
        (out.code, out.stdout, out.stderr)
    };
    let (code, stdout, _) = run("deny.yaml", plan);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("no-db-deletes")
            && stdout.contains("VIOLATED: terraform_data.db would be deleted (terraform_data.db)"),
        "{stdout}"
    );
    let (code, stdout, _) = run("ok.yaml", plan);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("pass"), "{stdout}");
    let (code, _, stderr) = run("ok.yaml", "notaplan.json");
    assert_eq!(code, 2);
    assert!(stderr.contains("not a Terraform plan"), "{stderr}");
}

#[test]
fn policy_test_checks_expectations_like_a_test_runner() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tfops-core/tests/fixtures/plan-delete-update-create.json"),
        dir.path().join("plan.json"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("policy.yaml"),
        "apiVersion: infra.argocd.io/v1alpha1\nkind: TerraformPolicy\nmetadata: { name: keep-data, namespace: team-a }\nspec:\n  selector: { tier: prod }\n  rules:\n    - name: no-deletes\n      expression: \"deletes.size() == 0\"\n    - name: few-changes\n      action: Warn\n      expression: \"changes.size() <= 10\"\n",
    )
    .unwrap();
    let cases = |expect_deletes: &str| {
        format!(
            "cases:\n  - name: the db delete\n    plan: plan.json\n    labels: {{ tier: prod }}\n    expect:\n      keep-data/no-deletes: {expect_deletes}\n      keep-data/few-changes: pass\n  - name: other tiers are not selected\n    plan: plan.json\n    expect:\n      keep-data/no-deletes: not-selected\n"
        )
    };
    std::fs::write(dir.path().join("policy.test.yaml"), cases("violated")).unwrap();
    let out = tfops(dir.path(), &["policy", "test", "."]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("3 passed, 0 failed"), "{}", out.stdout);
    std::fs::write(dir.path().join("policy.test.yaml"), cases("pass")).unwrap();
    let out = tfops(dir.path(), &["policy", "test", "."]);
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("FAIL") && out.stdout.contains("2 passed, 1 failed"),
        "{}",
        out.stdout
    );
}

/// `status.binary` of the object `name` in the project at `dir`.
fn status_binary(dir: &Path, name: &str) -> String {
    let status = tfops(dir, &["local", "status", name, "--output", "json"]);
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    v[0]["status"]["binary"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `spec.runner.binary` picks the binary per object; `--binary` (or `TFOPS_BINARY`) is what
/// `auto` means on this machine, and auto prefers tofu. Status and each run of the history
/// say which binary and version ran.
#[test]
fn the_objects_runner_binary_is_what_runs_and_status_says_so() {
    let version = |binary: Binary| {
        let out = Command::new(common::program(binary))
            .args(["version", "-json"])
            .env_remove("TF_CLI_CONFIG_FILE")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        format!(
            "{} {}",
            binary.as_str(),
            v["terraform_version"].as_str().unwrap()
        )
    };
    let (terraform_ran, tofu_ran) = (version(Binary::Terraform), version(Binary::Tofu));

    // The object names tofu; this machine's default is terraform: the object wins.
    let p = project(&object(
        "app",
        "  approvePlan: auto\n  runner:\n    binary: tofu\n",
    ));
    let out = tfops_with(
        Binary::Terraform,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(status_binary(p.path(), "app"), tofu_ran);
    let history = tfops(p.path(), &["local", "history", "app", "--output", "json"]);
    let runs: serde_json::Value = serde_json::from_str(&history.stdout).unwrap();
    assert_eq!(runs[0]["binary"], serde_json::json!(tofu_ran), "{runs}");
    let table = tfops(p.path(), &["local", "history", "app"]);
    assert!(table.stdout.contains("BINARY"), "{}", table.stdout);
    assert!(table.stdout.contains(&tofu_ran), "{}", table.stdout);

    // The other way round.
    let p = project(&object(
        "app",
        "  approvePlan: auto\n  runner:\n    binary: terraform\n",
    ));
    let out = tfops_with(
        Binary::Tofu,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(status_binary(p.path(), "app"), terraform_ran);

    // auto on a machine with both: tofu.
    let p = project(&object("app", "  approvePlan: auto\n"));
    let out = tfops_with(
        Binary::Auto,
        p.path(),
        &["local", "apply", "-f", "terraform.yaml"],
    );
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(status_binary(p.path(), "app"), tofu_ran);

    // A binary this machine does not have is said plainly, and nothing falls back to the other.
    let p = project(&object(
        "app",
        "  approvePlan: auto\n  runner:\n    binary: tofu\n",
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_tfops"))
        .args([
            "local",
            "apply",
            "-f",
            "terraform.yaml",
            "--binary",
            "terraform",
        ])
        .current_dir(p.path())
        .env("TFOPS_TERRAFORM", terraform())
        .env_remove("TFOPS_TOFU")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stdout.contains("spec.runner.binary is tofu, which this runner does not have"),
        "{stdout}"
    );
    assert!(!stdout.contains("TerraformAppliedSucceed"), "{stdout}");
}

/// On a terminal (a pseudo-terminal from util-linux's `script`), the running step shows a
/// spinner with its elapsed time, cleared before the step's line, and the status table's
/// columns line up although its cells are coloured.
#[test]
fn on_a_terminal_steps_spin_and_the_table_lines_up() {
    let p = hello();
    let command = format!(
        "{} local apply -f terraform.yaml",
        env!("CARGO_BIN_EXE_tfops")
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(p.path())
        .env("TFOPS_TERRAFORM", terraform())
        .output()
        .expect("script (util-linux) gives the command a terminal");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    // The spinner: its message with the dim elapsed time, then the line cleared for the step.
    assert!(
        text.contains(" apply \u{1b}[2m"),
        "a spinner for apply: {text:?}"
    );
    assert!(
        text.contains("\r\u{1b}[2K  apply"),
        "cleared before the step line: {text:?}"
    );
    // The table: READY is coloured, yet REASON starts where its heading does.
    let plain: Vec<String> = text
        .lines()
        .map(|l| {
            console::strip_ansi_codes(l)
                .trim_end_matches('\r')
                .to_string()
        })
        .collect();
    let header = plain.iter().find(|l| l.starts_with("OBJECT")).unwrap();
    let row = plain.iter().find(|l| l.starts_with("demo/hello")).unwrap();
    let column = header.find("REASON").unwrap();
    assert_eq!(
        row.get(column..column + "TerraformAppliedSucceed".len()),
        Some("TerraformAppliedSucceed"),
        "{header}\n{row}"
    );
}
