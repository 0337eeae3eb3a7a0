//! A command's timeout (`spec.timeout`) with the real binaries: a hung apply is interrupted as
//! Ctrl-C does, so what it made is in the state and its lock is free; a plan that ignores the
//! interrupt is killed after the grace period. Either way the controller gets `TimedOut`,
//! naming the command. A user's stop interrupts an apply the same way, saying who.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use test_case::test_case;
use tfops_core::api::Binary;
use tfops_core::ports::{PlanKind, PortError, RunnerSession, SetupRequest};
use tfops_runner::client::Session;

/// A session set up for `config` with `spec.timeout` `timeout`, and the runner it talks to.
async fn set_up(binary: Binary, config: &str, timeout: &str) -> (Session, Runner) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir(tree.path().join("infra")).unwrap();
    std::fs::write(tree.path().join("infra/main.tf"), config).unwrap();
    let mut object = object_run_by("infra", binary);
    object.spec.timeout = Some(timeout.into());
    let request = SetupRequest {
        object,
        artifact: artifact(tree.path()),
        inputs: Default::default(),
    };
    let mut s = session(runner.addr, &pki, "timeout").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    s.select_workspace("default").await.unwrap();
    (s, runner)
}

/// Processes whose command line is exactly `cmdline` (NUL-separated, as /proc has it).
fn running(cmdline: &[u8]) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|c| c.as_slice() == cmdline)
        .count()
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_hung_apply_is_interrupted_at_its_timeout_and_what_it_made_stays(binary: Binary) {
    // A second unique to this test, so that its sleep is told from any other.
    let secs = if binary == Binary::Tofu { 6133 } else { 6131 };
    let config = format!(
        r#"
resource "terraform_data" "first" {{
  input = "made"
}}
resource "terraform_data" "hangs" {{
  depends_on = [terraform_data.first]
  provisioner "local-exec" {{
    command = "exec sleep {secs}"
  }}
}}
"#
    );
    let (mut s, _runner) = set_up(binary, &config, "4s").await;
    assert_eq!(
        s.plan(&plan_of(PlanKind::Normal))
            .await
            .unwrap()
            .summary
            .add,
        2
    );
    let began = Instant::now();
    let stopped = s.apply("apply-1").await.unwrap_err();
    let PortError::TimedOut(why) = &stopped else {
        panic!("{stopped:?}")
    };
    assert!(
        why.starts_with(&format!(
            "{} apply ran past its timeout of 4s",
            binary.as_str()
        )),
        "{why}"
    );
    assert!(began.elapsed() >= Duration::from_secs(4));
    // Interrupted, not killed: Terraform stopped the provisioner and wrote the state.
    let sleep = format!("sleep\0{secs}\0");
    assert_eq!(running(sleep.as_bytes()), 0, "the provisioner was stopped");
    let kept: Vec<String> = s
        .inventory()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.address)
        .collect();
    assert!(
        kept.contains(&"terraform_data.first".to_string()),
        "{kept:?}"
    );
    // The lock is free: a plan that takes it runs, and has only the rest left to do.
    let rest = s.plan(&plan_of(PlanKind::Normal)).await.unwrap();
    assert!(rest.summary.add <= 1 && rest.has_changes, "{rest:?}");
    s.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_plan_that_ignores_the_interrupt_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("never-written");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    // Reading a FIFO nobody writes blocks inside the evaluation, past any interrupt.
    let config = format!(
        "output \"stuck\" {{\n  value = file({:?})\n}}\n",
        fifo.display().to_string()
    );
    let (mut s, _runner) = set_up(Binary::Terraform, &config, "2s").await;
    let began = Instant::now();
    let stopped = s.plan(&plan_of(PlanKind::Normal)).await.unwrap_err();
    let PortError::TimedOut(why) = &stopped else {
        panic!("{stopped:?}")
    };
    assert!(
        why.starts_with("terraform plan ran past its timeout of 2s"),
        "{why}"
    );
    // The runner's grace period (10 s) passed before the kill.
    assert!(
        began.elapsed() >= Duration::from_secs(12),
        "{:?}",
        began.elapsed()
    );
    s.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_users_stop_interrupts_an_apply_and_says_who() {
    let secs = 6137;
    let config = format!(
        "resource \"terraform_data\" \"first\" {{\n  input = \"made\"\n}}\nresource \"terraform_data\" \"hangs\" {{\n  depends_on = [terraform_data.first]\n  provisioner \"local-exec\" {{\n    command = \"exec sleep {secs}\"\n  }}\n}}\n"
    );
    let (mut s, _runner) = set_up(Binary::Terraform, &config, "1h").await;
    let (stop, stopping) = tokio::sync::watch::channel(None);
    s.stop_on(stopping);
    s.plan(&plan_of(PlanKind::Normal)).await.unwrap();
    let sleep = format!("sleep\0{secs}\0");
    let asked = tokio::spawn(async move {
        // Once the provisioner runs, the apply is under way: a user stops it.
        while running(sleep.as_bytes()) == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.send_replace(Some("alice".to_string()));
        stop
    });
    let stopped = s.apply("apply-1").await.unwrap_err();
    let _stop = asked.await.unwrap();
    let PortError::Stopped(why) = &stopped else {
        panic!("{stopped:?}")
    };
    assert!(why.starts_with("stopped by alice"), "{why}");
    // The stop holds for the rest of the session: the run is over.
    let later = s.inventory().await.unwrap_err();
    assert!(matches!(later, PortError::Stopped(_)), "{later:?}");
    assert_eq!(
        running(format!("sleep\0{secs}\0").as_bytes()),
        0,
        "the provisioner was stopped"
    );
}
