//! Criterion benchmarks of tfops and the data they run on.
//!
//! Each benchmark measures tfops against a baseline in the same run (see `benches/README.md`
//! for the figures): `plan_codec` against gzip-everything and a plain copy, `source_archive`
//! against GNU `tar -czf`. This library holds their data generators, and the `plan_peak_memory`
//! binary measures the codec's peak memory on a 200 MiB plan.

pub mod instant_runner;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Deterministic incompressible bytes (xorshift).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Deterministic compressible bytes shaped like `terraform show -json` output.
pub fn plan_like_text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 256);
    let mut i = 0u64;
    while out.len() < len {
        let _ = writeln!(
            out,
            "{{\"address\":\"terraform_data.r{i}\",\"mode\":\"managed\",\"type\":\"terraform_data\",\"name\":\"r{i}\",\"change\":{{\"actions\":[\"create\"],\"after\":{{\"input\":{{\"index\":{i},\"name\":\"resource-{i}\",\"tags\":[\"team-a\",\"net\"]}}}}}}}}"
        );
        i += 1;
    }
    out.truncate(len);
    out
}

/// The `terraform` binary to use: `TFOPS_TERRAFORM`, else `terraform` on `PATH`.
pub fn find_terraform() -> Option<PathBuf> {
    find_binary("terraform")
}

/// The binary `name` (`terraform`, `tofu`) to use: its variable, `PATH`, or the build of
/// `scripts/install-terraform` or `scripts/install-tofu` in this checkout
/// ([`tfops_testcluster::tools`]).
pub fn find_binary(name: &str) -> Option<PathBuf> {
    tfops_testcluster::tools::binary(name).ok()
}

/// The binaries the runner benchmarks measure, each with its path: Terraform and OpenTofu,
/// those found (a missing one is said on standard error and left out).
pub fn binaries(bench: &str) -> Vec<(&'static str, PathBuf)> {
    ["terraform", "tofu"]
        .into_iter()
        .filter_map(|name| {
            let found = find_binary(name);
            if found.is_none() {
                eprintln!(
                    "{bench}: no {name} found (scripts/install-terraform, scripts/install-tofu): skipped for it"
                );
            }
            found.map(|p| (name, p))
        })
        .collect()
}

/// Makes a real binary plan (`terraform plan -out`) of `resources` `terraform_data`
/// resources in `dir`, with `terraform`.
///
/// # Errors
/// A message with Terraform's output when init or plan fails.
pub fn real_plan(terraform: &Path, dir: &Path, resources: usize) -> Result<Vec<u8>, String> {
    let mut config = String::new();
    for i in 0..resources {
        config.push_str(&format!(
            "resource \"terraform_data\" \"r{i}\" {{\n  input = {{ name = \"resource-{i}\", index = {i}, tags = [\"team-a\", \"net\"] }}\n}}\n"
        ));
    }
    config.push_str(&format!("output \"count\" {{ value = {resources} }}\n"));
    std::fs::write(dir.join("main.tf"), config).map_err(|e| e.to_string())?;
    for args in [
        &["init", "-input=false"][..],
        &["plan", "-input=false", "-out=plan.tfplan"][..],
    ] {
        let out = Command::new(terraform)
            .args(args)
            .current_dir(dir)
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_CLI_CONFIG_FILE", "/dev/null")
            .output()
            .map_err(|e| format!("running {}: {e}", terraform.display()))?;
        if !out.status.success() {
            return Err(format!(
                "terraform {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    std::fs::read(dir.join("plan.tfplan")).map_err(|e| e.to_string())
}

/// The baseline of existing controllers: gzip the whole plan at flate2's default level, then
/// cut it into 1 MiB pieces.
pub fn gzip_everything(data: &[u8]) -> Vec<Vec<u8>> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(data);
    let stored = gz.finish().unwrap_or_default();
    stored.chunks(1 << 20).map(<[u8]>::to_vec).collect()
}

/// Reverses [`gzip_everything`].
pub fn gunzip_everything(chunks: &[Vec<u8>]) -> Vec<u8> {
    let joined: Vec<u8> = chunks.concat();
    let mut out = Vec::new();
    let _ = std::io::copy(&mut flate2::read::GzDecoder::new(&joined[..]), &mut out);
    out
}

/// The limit: copying the plan into 1 MiB pieces.
pub fn copy_chunks(data: &[u8]) -> Vec<Vec<u8>> {
    data.chunks(1 << 20).map(<[u8]>::to_vec).collect()
}

/// Writes a source tree: `small` files of 200–2,000 bytes in directories of 100, `large`
/// files of `large_size` bytes (half compressible), and ignored material (`.terraform/`,
/// `*.bak`, `.git/`) that archives must skip. Returns the ignore lines to pass.
///
/// # Errors
/// The I/O error.
pub fn source_tree(
    root: &Path,
    small: usize,
    large: usize,
    large_size: usize,
) -> std::io::Result<&'static str> {
    for i in 0..small {
        let dir = root.join(format!("modules/m{:03}", i / 100));
        std::fs::create_dir_all(&dir)?;
        let len = 200 + (i * 37) % 1800;
        let mut body = plan_like_text(len);
        body.extend_from_slice(format!("# file {i}\n").as_bytes());
        std::fs::write(dir.join(format!("f{i:05}.tf")), body)?;
    }
    for i in 0..large {
        let body = if i % 2 == 0 {
            plan_like_text(large_size)
        } else {
            noise(large_size, i as u64 + 1)
        };
        std::fs::write(root.join(format!("large-{i}.bin")), body)?;
    }
    for dir in [".terraform/providers", ".git/objects"] {
        std::fs::create_dir_all(root.join(dir))?;
        std::fs::write(root.join(dir).join("blob"), noise(1 << 20, 9))?;
    }
    std::fs::write(root.join("old.tf.bak"), b"ignored")?;
    Ok(".terraform/\n*.bak\n")
}

/// The directory of the starter policies and their fixture plans.
pub fn starter_policies_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/policies")
}

/// A plan JSON document with `changes` resource changes, built from the resource changes of
/// the starter policies' fixtures (real `terraform show -json` output) by repeating them under
/// new addresses: the same shapes, actions and values Terraform writes, at a size no fixture
/// configuration is worth planning for real.
pub fn plan_with_changes(changes: usize) -> Result<Vec<u8>, String> {
    let dir = starter_policies_dir().join("fixtures");
    let mut templates = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    let mut base = None;
    for path in entries {
        let text = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let plan: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(rc) = plan["resource_changes"].as_array() {
            templates.extend(rc.iter().cloned());
        }
        base.get_or_insert(plan);
    }
    let mut plan = base.ok_or("no fixture plans")?;
    if templates.is_empty() {
        return Err("the fixture plans have no resource changes".into());
    }
    let rc: Vec<serde_json::Value> = (0..changes)
        .map(|i| {
            let mut c = templates[i % templates.len()].clone();
            let name = format!("r{i}");
            let ty = c["type"].as_str().unwrap_or("terraform_data").to_string();
            c["name"] = name.clone().into();
            c["address"] = format!("{ty}.{name}").into();
            c
        })
        .collect();
    plan["resource_changes"] = rc.into();
    serde_json::to_vec(&plan).map_err(|e| e.to_string())
}
