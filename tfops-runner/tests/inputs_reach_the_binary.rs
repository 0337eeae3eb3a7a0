//! What the controller resolves from Secrets reaches the binary, with Terraform and with
//! OpenTofu: a `fileMappings` file in the workspace is read by the configuration, and the CLI
//! configuration of `cliConfigSecretRef` is the one the binary uses (its provider mirror is
//! the one `init` asks).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use test_case::test_case;
use tfops_core::api::{Binary, FileLocation};
use tfops_core::ports::{
    self, PlanRequest, PortError, ResolvedFile, ResolvedInputs, RunnerSession, SetupRequest,
};

const READS_A_MAPPED_FILE: &str = r#"
output "token" {
  value = trimspace(file("${path.module}/creds/token.txt"))
}
"#;

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn a_workspace_file_mapping_is_read_by_the_configuration(binary: Binary) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(tree.path().join("main.tf"), READS_A_MAPPED_FILE).unwrap();
    let request = SetupRequest {
        object: object_run_by("", binary),
        artifact: artifact(tree.path()),
        inputs: ResolvedInputs {
            files: vec![ResolvedFile {
                location: FileLocation::Workspace,
                path: "creds/token.txt".into(),
                content: b"t0k3n\n".to_vec(),
            }],
            ..Default::default()
        },
    };
    let mut s = session(runner.addr, &pki, "files-1").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    s.select_workspace("default").await.unwrap();
    let plan = s
        .plan(&PlanRequest {
            kind: ports::PlanKind::Normal,
            targets: vec![],
            parallelism: 0,
        })
        .await
        .unwrap();
    assert!(plan.has_changes, "the output is new");
    s.apply("apply-files-1").await.unwrap();
    let outputs = s.outputs().await.unwrap();
    assert_eq!(outputs["token"].value, serde_json::json!("t0k3n"));
    assert!(s.binary().starts_with(binary.as_str()), "{}", s.binary());
    s.cleanup().await.unwrap();
}

/// A configuration needing a provider, installed through the mirror of the CLI configuration:
/// a mirror nobody serves (port 9, discard) makes `init` fail naming it, which only happens
/// when the binary read that configuration.
#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn the_cli_configuration_of_the_object_is_the_one_the_binary_uses(binary: Binary) {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(
        tree.path().join("main.tf"),
        "terraform {\n  required_providers {\n    null = { source = \"hashicorp/null\" }\n  }\n}\n",
    )
    .unwrap();
    let cli_config =
        b"provider_installation {\n  network_mirror {\n    url = \"https://127.0.0.1:9/providers/\"\n  }\n}\n";
    let request = SetupRequest {
        object: object_run_by("", binary),
        artifact: artifact(tree.path()),
        inputs: ResolvedInputs {
            cli_config: Some(cli_config.to_vec()),
            ..Default::default()
        },
    };
    let mut s = session(runner.addr, &pki, "cli-1").await;
    s.setup(&request).await.unwrap();
    match s.init().await {
        // Terraform says "Failed to query available provider packages", OpenTofu "Failed to
        // resolve provider packages"; both name the mirror.
        Err(PortError::Terraform(d)) => {
            assert!(d.contains("https://127.0.0.1:9/providers/"), "{d}");
            assert!(d.contains("hashicorp/null"), "{d}");
        }
        other => panic!("init went past a mirror nobody serves: {other:?}"),
    }
    s.cleanup().await.unwrap();
}
