//! `steady_state`: the run every object has every `interval` — nothing changed, a drift check
//! that finds nothing. `tfops local apply` of `examples/hello` (the whole command: process,
//! runner child with a fresh CA, upload, init, refresh-only plan, status) against running
//! `terraform init -upgrade` and `terraform plan -refresh-only` directly on the same
//! configuration and state, in the same run; with Terraform and with OpenTofu
//! (`TFOPS_BINARY`), each against its own direct baseline.
//!
//! Needs a real terraform and tofu and a release build of the `tfops` binary: `cargo build --release -p
//! tfops-operator --bin tfops` (or `TFOPS_BIN`). See `benches/README.md`.

// A benchmark aborts when its setup fails: there is nothing to measure then.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

fn tfops_binary() -> Option<PathBuf> {
    let path = std::env::var_os("TFOPS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/tfops"));
    path.is_file().then_some(path)
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn bench(c: &mut Criterion) {
    let Some(tfops) = tfops_binary() else {
        eprintln!("steady_state: needs target/release/tfops (or TFOPS_BIN): skipped");
        return;
    };
    for (name, program) in benches::binaries("steady_state") {
        bench_binary(c, &tfops, name, &program);
    }
}

/// The benchmark with the binary `name` at `terraform`.
fn bench_binary(c: &mut Criterion, tfops: &Path, name: &str, terraform: &Path) {
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    let work = tempfile::tempdir().unwrap();
    let project = work.path().join("hello");
    copy_dir(&hello, &project);
    let local = |args: &[&str]| {
        let mut cmd = Command::new(tfops);
        cmd.args(args)
            .current_dir(&project)
            .env("TFOPS_BINARY", name)
            .env(
                if name == "tofu" {
                    "TFOPS_TOFU"
                } else {
                    "TFOPS_TERRAFORM"
                },
                terraform,
            );
        cmd
    };
    // The first apply creates everything; every later one finds nothing to do.
    run(&mut local(&["local", "apply", "-f", "terraform.yaml"]));

    // Direct: the same configuration, variables and (local) state.
    let direct = work.path().join("direct");
    copy_dir(&project.join("infra"), &direct);
    let tf = |args: &[&str]| {
        let mut cmd = Command::new(terraform);
        cmd.args(args)
            .current_dir(&direct)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env_remove("TF_CLI_CONFIG_FILE");
        cmd
    };
    let vars = ["-var", "greeting=hello", "-var", "replicas=3"];
    run(&mut tf(&["init", "-input=false", "-no-color"]));
    let mut apply = vec!["apply", "-auto-approve", "-input=false", "-no-color"];
    apply.extend(vars);
    run(&mut tf(&apply));
    let mut refresh = vec!["plan", "-refresh-only", "-input=false", "-no-color"];
    refresh.extend(vars);

    let mut g = c.benchmark_group(format!(
        "steady_state/examples-hello-nothing-changed/{name}"
    ));
    g.sample_size(20);
    g.warm_up_time(Duration::from_secs(2));
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("direct: init -upgrade + plan -refresh-only", |b| {
        b.iter(|| {
            run(&mut tf(&["init", "-upgrade", "-input=false", "-no-color"]));
            run(&mut tf(&refresh));
        })
    });
    g.bench_function("tfops local apply", |b| {
        b.iter(|| run(&mut local(&["local", "apply", "-f", "terraform.yaml"])))
    });
    g.finish();
}

criterion_group!(steady_state, bench);
criterion_main!(steady_state);
