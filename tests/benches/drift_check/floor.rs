//! The floor of a drift check: what no controller can avoid. A container of the runner image
//! started and removed (`podman run --rm`, as the node agent runs runner Pods: runc), and
//! `terraform init` plus `plan -refresh-only` of the same configuration run directly: with a
//! local state, and with the state where the runner keeps it (Terraform's kubernetes backend
//! on the same API server, whose every lock is a write to etcd).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The floor's parts, one value per sample.
pub(crate) struct Floor {
    pub(crate) podman: Vec<Duration>,
    pub(crate) direct: Vec<Duration>,
    /// The direct commands with the kubernetes backend (measured beside the kept Pod's checks).
    pub(crate) direct_kubernetes: Vec<Duration>,
}

/// Measures the container start and the direct commands (local state) `samples` times.
pub(crate) fn measure(image: &str, samples: usize) -> Floor {
    let podman = (0..samples)
        .map(|_| {
            timed(Command::new("podman").args([
                "--runtime",
                "runc",
                "run",
                "--rm",
                // As the node agent runs a runner Pod (this machine's limits allow no more).
                "--ulimit",
                "nofile=20000:20000",
                "--ulimit",
                "nproc=4096:4096",
                "--pull",
                "never",
                "--entrypoint",
                "/bin/true",
                image,
            ]))
        })
        .collect();
    Floor {
        podman,
        direct: direct(samples, None),
        direct_kubernetes: Vec::new(),
    }
}

/// `init -upgrade` + `plan -refresh-only` of the benchmark's configuration, `samples` times,
/// after an apply; with the state in the cluster of `kubeconfig` (namespace `team-a`) when
/// given, else in a local file.
pub(crate) fn direct(samples: usize, kubeconfig: Option<&Path>) -> Vec<Duration> {
    let terraform = tfops_testcluster::tools::binary("terraform").unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::operator::CONFIG.to_string();
    if let Some(kubeconfig) = kubeconfig {
        config.push_str(&format!(
            "terraform {{\n  backend \"kubernetes\" {{\n    secret_suffix = \"bench-direct\"\n    namespace     = \"team-a\"\n    config_path   = \"{}\"\n  }}\n}}\n",
            kubeconfig.display()
        ));
    }
    std::fs::write(dir.path().join("main.tf"), config).unwrap();
    let tf = |args: &[&str]| {
        let mut c = Command::new(&terraform);
        c.args(args)
            .current_dir(dir.path())
            .env("TF_IN_AUTOMATION", "1")
            .env_remove("TF_CLI_CONFIG_FILE");
        c
    };
    timed(&mut tf(&["init", "-input=false"]));
    timed(&mut tf(&["apply", "-auto-approve", "-input=false"]));
    (0..samples)
        .map(|_| {
            timed(&mut tf(&["init", "-input=false", "-upgrade"]))
                + timed(&mut tf(&[
                    "plan",
                    "-refresh-only",
                    "-input=false",
                    "-detailed-exitcode",
                ]))
        })
        .collect()
}

/// How long `command` took; it must succeed (a refresh-only plan that finds nothing exits 0).
fn timed(command: &mut Command) -> Duration {
    let began = Instant::now();
    let status = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{command:?}: {status}");
    began.elapsed()
}
