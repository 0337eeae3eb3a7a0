//! Shared by the runner's tests: the real terraform binary and small configurations.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The terraform the tests run: `TFOPS_TERRAFORM`, else `terraform` on `PATH`. The tests need
/// a real one; `scripts/install-terraform` provides it (scripts/test exports it).
pub fn terraform() -> PathBuf {
    if let Some(p) = std::env::var_os("TFOPS_TERRAFORM") {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("terraform"))
                .find(|p| p.is_file())
        })
        .expect("no terraform: run scripts/install-terraform and set TFOPS_TERRAFORM")
}

/// A configuration: two resources, a variable, outputs (one sensitive), and a value read from
/// another local state (`upstream.tfstate`) so a test can make real drift.
pub const CONFIG: &str = r#"
variable "size" {
  type    = number
  default = 1
}

data "terraform_remote_state" "upstream" {
  backend = "local"
  config = {
    path = "${path.module}/upstream.tfstate"
  }
}

resource "terraform_data" "a" {
  input = "a-${var.size}"
}

resource "terraform_data" "b" {
  input = data.terraform_remote_state.upstream.outputs.color
}

output "a" {
  value = terraform_data.a.output
}

output "color" {
  value = terraform_data.b.output
}

output "upstream_color" {
  value = data.terraform_remote_state.upstream.outputs.color
}

output "secret" {
  value     = "s3cr3t-${var.size}"
  sensitive = true
}
"#;

/// A local state file whose only output `color` is `color`.
pub fn upstream_state(color: &str, serial: u32) -> String {
    format!(
        r#"{{"version":4,"terraform_version":"1.5.0","serial":{serial},"lineage":"00000000-0000-0000-0000-000000000000","outputs":{{"color":{{"value":"{color}","type":"string"}}}},"resources":[],"check_results":null}}"#
    )
}

pub fn write_config(dir: &Path, extra: &str) {
    std::fs::write(dir.join("main.tf"), format!("{CONFIG}\n{extra}")).unwrap();
    std::fs::write(dir.join("upstream.tfstate"), upstream_state("blue", 1)).unwrap();
}
