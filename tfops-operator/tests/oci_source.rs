//! OCI sources against a real registry (Debian's `docker-registry`, the CNCF distribution
//! registry) on 127.0.0.1: push, tag and semver resolution, pull and extraction, a tampered
//! layer, and htpasswd authentication.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use tfops_core::api::SourceRevisionRef;
use tfops_operator::sources::oci::{OciCredentials, OciError, OciSource};

mod common;
use common::{Server, free_port, serve, tfops};

/// A running registry and the directory holding its config and storage.
struct Registry {
    server: Server,
    /// Its config and storage (the tampering test edits blobs here).
    dir: tempfile::TempDir,
}

/// Starts `docker-registry` in `dir` on `port`, with `extra` appended to its `http:`-level
/// config (TLS, auth).
fn start_registry(dir: tempfile::TempDir, port: u16, extra: &str) -> Registry {
    let config = format!(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n{extra}",
        dir.path().join("data").display()
    );
    std::fs::write(dir.path().join("config.yml"), config).unwrap();
    let mut command = Command::new("docker-registry");
    command.arg("serve").arg(dir.path().join("config.yml"));
    let server = serve(command, || Some(port));
    Registry { server, dir }
}

/// A registry on a free loopback port; with `auth`, only alice/wonderland may use it.
fn registry(auth: bool) -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let mut extra = String::new();
    if auth {
        let out = Command::new("htpasswd")
            .args(["-Bbn", "alice", "wonderland"])
            .output()
            .expect("htpasswd (apache2-utils)");
        std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
        extra = format!(
            "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
            dir.path().join("htpasswd").display()
        );
    }
    start_registry(dir, free_port(), &extra)
}

fn tree(content: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("main.tf"), content).unwrap();
    t
}

fn reference(j: serde_json::Value) -> SourceRevisionRef {
    serde_json::from_value(j).unwrap()
}

fn read(dest: &Path) -> String {
    std::fs::read_to_string(dest.join("main.tf")).unwrap()
}

#[tokio::test]
async fn push_resolve_pull_by_tag_and_semver() {
    let r = registry(false);
    let url = format!("oci://127.0.0.1:{}/platform/network", r.server.port);
    let oci = OciSource::new(true);
    let none = OciCredentials::default();
    let mut digests = Vec::new();
    for (tag, body) in [
        ("v1.0.0", "one"),
        ("v1.2.0", "two"),
        ("v2.0.0", "three"),
        ("latest", "three"),
    ] {
        digests.push(
            oci.push(tree(body).path(), &url, tag, None, &none)
                .await
                .unwrap(),
        );
    }
    let (name, digest) = oci
        .resolve(
            &url,
            &reference(serde_json::json!({"tag": "v1.0.0"})),
            &none,
        )
        .await
        .unwrap();
    assert_eq!(
        (name.as_str(), digest.as_str()),
        ("v1.0.0", digests[0].as_str())
    );
    let (name, digest) = oci
        .resolve(
            &url,
            &reference(serde_json::json!({"semver": ">=1.0.0 <2.0.0"})),
            &none,
        )
        .await
        .unwrap();
    assert_eq!(
        (name.as_str(), digest.as_str()),
        ("v1.2.0", digests[1].as_str())
    );
    let (name, _) = oci
        .resolve(&url, &reference(serde_json::json!({})), &none)
        .await
        .unwrap();
    assert_eq!(name, "latest");
    let dest = tempfile::tempdir().unwrap();
    oci.pull(&url, &digest, &none, &dest.path().join("x"))
        .await
        .unwrap();
    assert_eq!(read(&dest.path().join("x")), "two");
    // A digest reference is used as is.
    let (_, same) = oci
        .resolve(
            &url,
            &reference(serde_json::json!({"digest": digests[2]})),
            &none,
        )
        .await
        .unwrap();
    assert_eq!(same, digests[2]);

    let err = oci
        .resolve(&url, &reference(serde_json::json!({"tag": "v9"})), &none)
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::NotFound { .. }), "{err}");
    let err = oci
        .resolve(
            &url,
            &reference(serde_json::json!({"semver": ">=5"})),
            &none,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no tag matches"), "{err}");
}

#[tokio::test]
async fn a_tampered_layer_is_refused_and_nothing_is_extracted() {
    let r = registry(false);
    let url = format!("oci://127.0.0.1:{}/platform/network", r.server.port);
    let oci = OciSource::new(true);
    let none = OciCredentials::default();
    let digest = oci
        .push(tree("genuine").path(), &url, "v1", None, &none)
        .await
        .unwrap();
    // Rewrite every blob that holds the archive (the layer) behind the registry's back.
    let blobs = r.dir.path().join("data/docker/registry/v2/blobs/sha256");
    let mut tampered = 0;
    for prefix in std::fs::read_dir(&blobs).unwrap() {
        for blob in std::fs::read_dir(prefix.unwrap().path()).unwrap() {
            let data = blob.unwrap().path().join("data");
            let bytes = std::fs::read(&data).unwrap();
            if bytes.starts_with(&[0x1f, 0x8b]) {
                let mut evil = tfops_core_archive(tree("evil").path());
                evil.truncate(bytes.len().min(evil.len()));
                std::fs::write(&data, evil).unwrap();
                tampered += 1;
            }
        }
    }
    assert_eq!(tampered, 1);
    let dest = tempfile::tempdir().unwrap();
    let err = oci
        .pull(&url, &digest, &none, &dest.path().join("x"))
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::DigestMismatch { .. }), "{err}");
    assert!(!dest.path().join("x").exists(), "nothing extracted");
}

fn tfops_core_archive(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    tfops_core::source::build_archive(dir, None, &mut out).unwrap();
    out
}

#[tokio::test]
async fn htpasswd_authentication_is_required_and_honoured() {
    let r = registry(true);
    let url = format!("oci://127.0.0.1:{}/platform/network", r.server.port);
    let oci = OciSource::new(true);
    let alice = OciCredentials {
        username: Some("alice".into()),
        password: Some("wonderland".into()),
    };
    oci.push(tree("secret infra").path(), &url, "v1", None, &alice)
        .await
        .unwrap();
    let (_, digest) = oci
        .resolve(&url, &reference(serde_json::json!({"tag": "v1"})), &alice)
        .await
        .unwrap();
    let dest = tempfile::tempdir().unwrap();
    oci.pull(&url, &digest, &alice, &dest.path().join("x"))
        .await
        .unwrap();
    assert_eq!(read(&dest.path().join("x")), "secret infra");

    let anonymous = OciSource::new(true);
    let err = anonymous
        .resolve(
            &url,
            &reference(serde_json::json!({"tag": "v1"})),
            &OciCredentials::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::AccessDenied { .. }), "{err}");
    let wrong = OciCredentials {
        username: Some("alice".into()),
        password: Some("guess".into()),
    };
    let err = OciSource::new(true)
        .resolve(&url, &reference(serde_json::json!({"tag": "v1"})), &wrong)
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::AccessDenied { .. }), "{err}");
    assert!(!err.to_string().contains("guess"));
}

/// The configuration's layer as GNU tar packs a directory (`tar -C dir -czf - .`: a `./` root
/// entry first, every path under `./`).
fn gnu_tar_layer(dir: &Path) -> Vec<u8> {
    let out = Command::new("tar")
        .arg("-C")
        .arg(dir)
        .args(["-czf", "-", "."])
        .output()
        .expect("GNU tar runs");
    assert!(out.status.success());
    out.stdout
}

/// The layer as Go's archive/tar writes it from Flux's builder: a `.` directory entry first,
/// then the files by their relative names.
fn go_style_layer(dir: &Path) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut root = tar::Header::new_gnu();
    root.set_entry_type(tar::EntryType::Directory);
    root.set_mode(0o755);
    root.set_size(0);
    builder
        .append_data(&mut root, ".", std::io::empty())
        .unwrap();
    let main = std::fs::read(dir.join("main.tf")).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(main.len() as u64);
    builder.append_data(&mut h, "main.tf", &main[..]).unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_packed_by_gnu_tar_and_as_flux_packs_them_are_pulled_and_applied() {
    let r = registry(false);
    let oci = OciSource::new(true);
    let none = OciCredentials::default();
    let infra = tree(
        "resource \"terraform_data\" \"a\" {\n  input = \"packed\"\n}\noutput \"a\" {\n  value = terraform_data.a.output\n}\n",
    );
    for (name, layer) in [
        ("gnu", gnu_tar_layer(infra.path())),
        ("flux", go_style_layer(infra.path())),
    ] {
        let url = format!("oci://127.0.0.1:{}/platform/{name}", r.server.port);
        oci.push_archive(layer, &url, "v1.0.0", &none)
            .await
            .unwrap();
        let project = tempfile::tempdir().unwrap();
        let yaml = format!(
            "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: {name}\n  namespace: demo\nspec:\n  sourceRef:\n    kind: OCIRepository\n    url: {url}\n    insecure: true\n    ref:\n      tag: v1.0.0\n  approvePlan: auto\n"
        );
        std::fs::write(project.path().join("terraform.yaml"), yaml).unwrap();
        let project_path = project.path().to_path_buf();
        let out = tokio::task::spawn_blocking(move || {
            tfops(&project_path, &["local", "apply", "-f", "terraform.yaml"])
        })
        .await
        .unwrap();
        assert_eq!(out.code, 0, "{name}: {}{}", out.stdout, out.stderr);
        assert!(
            out.stdout.contains(r#"a="packed""#),
            "{name}: {}",
            out.stdout
        );
    }
}

#[test]
fn tfops_source_push_then_local_mode_on_an_oci_repository() {
    let r = registry(false);
    let infra = tree(
        "resource \"terraform_data\" \"a\" {\n  input = \"from-oci\"\n}\noutput \"a\" {\n  value = terraform_data.a.output\n}\n",
    );
    let target = format!("oci://127.0.0.1:{}/platform/network:v1.0.0", r.server.port);
    let out = tfops(
        Path::new("."),
        &[
            "source",
            "push",
            infra.path().to_str().unwrap(),
            &target,
            "--insecure",
        ],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("@sha256:"));

    let project = tempfile::tempdir().unwrap();
    let yaml = format!(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: net\n  namespace: demo\nspec:\n  sourceRef:\n    kind: OCIRepository\n    url: oci://127.0.0.1:{}/platform/network\n    insecure: true\n    ref:\n      semver: \">=1.0.0\"\n  approvePlan: auto\n",
        r.server.port
    );
    std::fs::write(project.path().join("terraform.yaml"), yaml).unwrap();
    let out = tfops(project.path(), &["local", "apply", "-f", "terraform.yaml"]);
    let stdout = &out.stdout;
    assert_eq!(out.code, 0, "{stdout}{}", out.stderr);
    assert!(stdout.contains(r#"a="from-oci""#), "{stdout}");
    assert!(stdout.contains("v1.0.0@sha256:"), "{stdout}");
}

#[tokio::test]
async fn a_registry_with_a_private_ca_is_trusted_only_with_that_ca() {
    // A CA and a certificate for 127.0.0.1, made for this test.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test registry CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = params.signed_by(&key, &issuer).unwrap();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    let tls = format!(
        "  tls:\n    certificate: {d}/tls.crt\n    key: {d}/tls.key\n",
        d = dir.path().display()
    );
    let registry = start_registry(dir, free_port(), &tls);
    let port = registry.server.port;
    let url = format!("oci://127.0.0.1:{port}/platform/network");
    let none = OciCredentials::default();
    let trusted = OciSource::with_ca(false, Some(&ca_cert.pem()));
    let pushed = trusted
        .push(tree("over tls").path(), &url, "v1", None, &none)
        .await;
    let refused = OciSource::new(false)
        .resolve(&url, &reference(serde_json::json!({"tag": "v1"})), &none)
        .await;
    drop(registry);
    let digest = pushed.unwrap();
    assert!(digest.starts_with("sha256:"));
    assert!(
        refused.is_err(),
        "without the CA the registry's certificate is not trusted"
    );
}
