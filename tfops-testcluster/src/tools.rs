//! Terraform and OpenTofu for tests and benchmarks: found where a contributor already has
//! them, so that `cargo test -p <crate>` runs without exporting anything once
//! `scripts/install-terraform` and `scripts/install-tofu` have built them.
//!
//! Order, for each: its variable (`TFOPS_TERRAFORM`, `TFOPS_TOFU`), then `PATH`, then where the
//! install script builds it in this checkout (`$TFOPS_TOOLS`, else `.tools`):
//! `bin/terraform`, `opentofu/<TOFU_VERSION>/tofu`.

use std::path::{Path, PathBuf};

/// The OpenTofu release `scripts/install-tofu` builds (its `tofu_version`).
pub const TOFU_VERSION: &str = "1.12.6";

/// Neither the variable, nor `PATH`, nor this checkout's tools have the binary.
#[derive(Debug, thiserror::Error)]
#[error(
    "no {name} found ({variable} unset, none on PATH, none at {}): run {script} (it builds one there), or set {variable} to a {name} binary",
    .looked.display()
)]
pub struct Missing {
    /// `terraform` or `tofu`.
    pub name: String,
    /// The variable that names it.
    pub variable: &'static str,
    /// The install script that builds it.
    pub script: &'static str,
    /// Where that script puts it.
    pub looked: PathBuf,
}

/// The `terraform` or `tofu` binary (`name`), found as the module says.
///
/// # Errors
/// [`Missing`], naming the script to run; also for a name other than the two.
pub fn binary(name: &str) -> Result<PathBuf, Missing> {
    let tools = std::env::var_os("TFOPS_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
    let (variable, script, built) = match name {
        "tofu" => (
            "TFOPS_TOFU",
            "scripts/install-tofu",
            tools.join("opentofu").join(TOFU_VERSION).join("tofu"),
        ),
        _ => (
            "TFOPS_TERRAFORM",
            "scripts/install-terraform",
            tools.join("bin/terraform"),
        ),
    };
    let missing = || Missing {
        name: name.to_string(),
        variable,
        script,
        looked: built.clone(),
    };
    if !matches!(name, "terraform" | "tofu") {
        return Err(missing());
    }
    if let Some(path) = std::env::var_os(variable) {
        return Ok(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    on_path
        .or_else(|| built.is_file().then(|| built.clone()))
        .ok_or_else(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pinned version is the install script's, so the path looked at is where it builds.
    #[test]
    fn the_tofu_version_is_the_install_scripts() {
        let script = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/install-tofu"),
        )
        .unwrap_or_default();
        assert!(
            script
                .lines()
                .any(|l| l == format!("tofu_version={TOFU_VERSION}")),
            "scripts/install-tofu pins another version than {TOFU_VERSION}"
        );
    }

    #[test]
    fn a_missing_binary_names_the_script_that_builds_it() {
        let e = Missing {
            name: "tofu".into(),
            variable: "TFOPS_TOFU",
            script: "scripts/install-tofu",
            looked: PathBuf::from("/x/.tools/opentofu/1.12.6/tofu"),
        }
        .to_string();
        assert!(e.contains("run scripts/install-tofu"), "{e}");
        assert!(e.contains("set TFOPS_TOFU"), "{e}");
        assert!(binary("packer").is_err(), "only terraform and tofu");
    }
}
