//! The images `scripts/build-images` builds (`TFOPS_RUNNER_IMAGE`, `TFOPS_MANAGER_IMAGE`), run
//! as containers with podman and runc, hardened as a runner Pod is (docs/security.md): the runner
//! image serves mutual TLS on its port and refuses a certificate of another CA; inside it, as
//! UID 65532 with a read-only root, no capabilities, no privilege escalation and the runtime's
//! default seccomp profile, `terraform` and `tofu` run, `/` is not writable and `/tmp` and
//! `/home/runner` (emptyDir-like mounts) are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use tfops_runner::client::{ClientTls, RunnerClient};
use tfops_runner::tls::{Pki, runner_server_name};

fn image(variable: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is unset: run scripts/build-images and set it to the image it prints")
    })
}

/// `podman --runtime runc ARGS`: runc, not crun, and explicit ulimits (the notes: crun refuses
/// these machines' cgroups; podman's default open-file limit is above the hard limit).
fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(["--runtime", "runc"])
        .args(args)
        .output()
        .expect("podman runs")
}

/// `podman run` of `image` hardened as the runner Pod is: the security context of docs/security.md,
/// and host directories owned by 65532 at /tmp and /home/runner, as emptyDirs are.
fn hardened_run(dirs: &Path, extra: &[&str]) -> Vec<String> {
    for d in ["tmp", "home"] {
        let dir = dirs.join(d);
        std::fs::create_dir_all(&dir).unwrap();
        nix::unistd::chown(&dir, Some(65532.into()), Some(65532.into())).unwrap();
    }
    let mut args: Vec<String> = [
        "run",
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=4096:4096",
        "--user",
        "65532:65532",
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop=ALL",
        "--security-opt",
        "no-new-privileges",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    args.push(format!("--volume={}:/tmp", dirs.join("tmp").display()));
    args.push(format!(
        "--volume={}:/home/runner",
        dirs.join("home").display()
    ));
    args.extend(extra.iter().map(ToString::to_string));
    args
}

#[test]
fn inside_the_runner_image_the_promises_of_seed_002_hold() {
    let runner = image("TFOPS_RUNNER_IMAGE");
    let dirs = tempfile::tempdir().unwrap();
    let script = "id -u; grep -E '^(CapEff|Seccomp|NoNewPrivs):' /proc/self/status; \
                  if touch /written 2>/dev/null; then echo root-writable; else echo root-read-only; fi; \
                  touch /tmp/x && echo tmp-writable; touch /home/runner/x && echo home-writable; \
                  terraform version | head -n 1; tofu version | head -n 1";
    let mut args = hardened_run(
        dirs.path(),
        &[
            "--rm",
            "--env",
            "TF_CLI_CONFIG_FILE=/dev/null",
            "--entrypoint",
            "/bin/sh",
        ],
    );
    args.extend([runner, "-c".into(), script.into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = podman(&args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert_eq!(lines[0], "65532", "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    // 2: a seccomp filter (podman's default profile, what RuntimeDefault is on a node).
    assert!(text.contains("Seccomp:\t2"), "{text}");
    for expected in ["root-read-only", "tmp-writable", "home-writable"] {
        assert!(lines.contains(&expected), "{expected}: {text}");
    }
    assert!(
        lines.iter().any(|l| l.starts_with("Terraform v1.")),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("OpenTofu v1.")),
        "{text}"
    );
}

/// Removes the container when dropped.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "0", &self.0]);
    }
}

#[tokio::test]
async fn the_runner_image_serves_mtls_on_its_port_and_refuses_another_ca() {
    let runner = image("TFOPS_RUNNER_IMAGE");
    let day = Duration::from_secs(86_400);
    let pki = Pki::new(SystemTime::now(), 30 * day, 7 * day, 3 * day).unwrap();
    let secret = pki.runner_secret("team-a", SystemTime::now()).unwrap();
    let dirs = tempfile::tempdir().unwrap();
    let tls = dirs.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    for (file, pem) in [
        ("ca.crt", &secret.ca_crt),
        ("tls.crt", &secret.tls_crt),
        ("tls.key", &secret.tls_key),
    ] {
        std::fs::write(tls.join(file), pem).unwrap();
        nix::unistd::chown(&tls.join(file), Some(65532.into()), None).unwrap();
    }
    let name = format!("tfops-runner-test-{}", std::process::id());
    let tls_mount = format!("--volume={}:/tls:ro", tls.display());
    let mut args = hardened_run(
        dirs.path(),
        &[
            "--detach",
            "--name",
            &name,
            &tls_mount,
            "--env",
            "POD_NAME=vpc-tf-runner",
            "--env",
            "POD_NAMESPACE=team-a",
        ],
    );
    args.extend(
        [
            runner.as_str(),
            "--grpc-port",
            "30000",
            "--tls-dir",
            "/tls",
            "--workdir-root",
            "/tmp",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = podman(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _container = Container(name.clone());
    // The container's address on podman's bridge, which the host reaches (as a controller
    // reaches a Pod IP).
    let inspect = podman(&[
        "inspect",
        "--format",
        "{{.NetworkSettings.IPAddress}}",
        &name,
    ]);
    let ip = String::from_utf8_lossy(&inspect.stdout).trim().to_string();
    assert!(!ip.is_empty(), "no container address");
    let endpoint = format!("https://{ip}:30000");
    let client = pki.client(SystemTime::now()).unwrap();
    let good = ClientTls {
        ca_bundle: pki.trust_bundle(),
        cert: client.cert,
        key: client.key,
        server_name: runner_server_name("team-a"),
    };
    let started = std::time::Instant::now();
    let (binary, version) = loop {
        match RunnerClient::connect(&endpoint, &good).await {
            Ok(mut c) => break c.info().await.unwrap(),
            Err(e) => {
                let logs = podman(&["logs", &name]);
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "the runner never answered: {e}; {}",
                    String::from_utf8_lossy(&logs.stderr)
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(
        binary, "tofu",
        "auto prefers tofu in an image that has both"
    );
    assert!(version.starts_with("1."), "{version}");

    let other = Pki::new(SystemTime::now(), 30 * day, 7 * day, 3 * day).unwrap();
    let stranger = other.client(SystemTime::now()).unwrap();
    let bad = ClientTls {
        cert: stranger.cert,
        key: stranger.key,
        ..good.clone()
    };
    let refused = match RunnerClient::connect(&endpoint, &bad).await {
        Ok(mut c) => c.info().await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a certificate of another CA was served");
}

#[test]
fn the_manager_image_runs_hardened_and_reports_its_version() {
    let manager = image("TFOPS_MANAGER_IMAGE");
    let dirs = tempfile::tempdir().unwrap();
    let mut args = hardened_run(dirs.path(), &["--rm"]);
    args.extend([manager, "--version".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = podman(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("tfops-manager"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
