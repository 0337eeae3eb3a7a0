//! The floor of a drift check: what no controller can avoid. A container of the runner image
//! started and removed (`podman run --rm`, as the node agent runs runner Pods: runc), and
//! `terraform init` plus `plan -refresh-only` of the same configuration run directly, with
//! its state at hand.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The floor's parts, one value per sample.
pub(crate) struct Floor {
    pub(crate) podman: Vec<Duration>,
    pub(crate) direct: Vec<Duration>,
}

/// Measures both parts `samples` times.
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
    let terraform = tfops_testcluster::tools::binary("terraform").unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.tf"), crate::support::operator::CONFIG).unwrap();
    let tf = |args: &[&str]| {
        let mut c = Command::new(&terraform);
        c.args(args)
            .current_dir(dir.path())
            .env("TF_IN_AUTOMATION", "1")
            .env_remove("TF_CLI_CONFIG_FILE");
        c
    };
    assert!(tf(&["init", "-input=false"]).status().unwrap().success());
    assert!(
        tf(&["apply", "-auto-approve", "-input=false"])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
    );
    let direct = (0..samples)
        .map(|_| {
            timed(&mut tf(&["init", "-input=false", "-upgrade"]))
                + timed(&mut tf(&[
                    "plan",
                    "-refresh-only",
                    "-input=false",
                    "-detailed-exitcode",
                ]))
        })
        .collect();
    Floor { podman, direct }
}

/// How long `command` took; it must succeed (or say "no changes" as plan's exit 0).
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
