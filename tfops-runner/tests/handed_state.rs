//! A state handed to the runner (a pull request's plan, whose Pod has no Kubernetes identity):
//! the real binary plans against it from a local backend, in the object's workspace, and the
//! runner refuses every command that would change infrastructure or write for the object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::Command;

use common::*;
use test_case::test_case;
use tfops_core::api::Binary;
use tfops_core::ports::{PlanKind, RunnerSession, SetupRequest};

/// The state an apply of [`CONFIG`] leaves, made by the binary itself, gzipped as the
/// kubernetes backend stores it.
fn applied_state(binary: Binary, config: &std::path::Path) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    for file in ["main.tf", "upstream.tfstate"] {
        std::fs::copy(config.join(file), dir.path().join(file)).unwrap();
    }
    for args in [
        &["init", "-input=false", "-no-color"][..],
        &["apply", "-auto-approve", "-input=false", "-no-color"],
    ] {
        let out = Command::new(program(binary))
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let state = std::fs::read(dir.path().join("terraform.tfstate")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&state).unwrap();
    gz.finish().unwrap()
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_handed_state_is_planned_against_and_nothing_can_write(binary: Binary) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    let config = tree.path().join("infra");
    std::fs::create_dir(&config).unwrap();
    write_config(&config, "");
    let state = applied_state(binary, &config);
    // tfops' own backend (no backendConfig), in a workspace of the object's.
    let mut object = object_run_by("infra", binary);
    object.spec.backend_config = None;
    object.spec.workspace = "staging".into();
    let request = SetupRequest {
        object,
        artifact: artifact(tree.path()),
        inputs: Default::default(),
    };

    for (handed, changes) in [(Vec::new(), 2), (state, 0)] {
        let mut s = session(runner.addr, &pki, "pr").await;
        s.hand_state(handed);
        s.setup(&request).await.unwrap();
        s.init().await.unwrap();
        s.select_workspace("staging").await.unwrap();
        let plan = s.plan(&plan_of(PlanKind::Speculative)).await.unwrap();
        assert_eq!(
            plan.summary.add, changes,
            "planned against the state handed over: {plan:?}"
        );
        assert_eq!(plan.has_changes, changes > 0);
        for refused in [
            s.apply("apply-1").await.unwrap_err().to_string(),
            s.plan(&plan_of(PlanKind::Normal))
                .await
                .unwrap_err()
                .to_string(),
            s.force_unlock("some-lock").await.unwrap_err().to_string(),
        ] {
            assert!(
                refused.contains("handed its object's state read-only"),
                "{refused}"
            );
        }
        s.cleanup().await.unwrap();
    }
}
