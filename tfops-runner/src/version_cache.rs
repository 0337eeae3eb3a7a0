//! The version of the runner's binary, remembered by the runner processes that share a working
//! root: `tfops local` starts one per command on the same `.tfops/work`, and `terraform
//! version` is a process start (about 35 ms of CPU on two cores, beside `init`) that would
//! otherwise be paid by every drift check. A runner Pod starts with an empty root and asks once.
//!
//! An entry is keyed by the binary's path, size and modification time, so a binary replaced
//! in place (another version installed) is asked again. The file is written whole under another
//! name and renamed over the old one: a reader sees one or the other, never half of it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The cache file in `root`.
fn file(root: &Path) -> PathBuf {
    root.join(".tfops-binary-versions.json")
}

/// The key of `program` as it is now: `None` when it cannot be read.
fn key(program: &Path) -> Option<String> {
    let meta = std::fs::metadata(program).ok()?;
    let modified = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{}|{}|{}",
        program.display(),
        meta.len(),
        modified.as_nanos()
    ))
}

fn entries(root: &Path) -> BTreeMap<String, String> {
    std::fs::read(file(root))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The version remembered for `program`, if it has not changed since.
pub fn read(root: &Path, program: &Path) -> Option<String> {
    entries(root).remove(&key(program)?)
}

/// Remembers `version` for `program`; a failure only costs the next runner a `version` call.
pub fn write(root: &Path, program: &Path, version: &str) {
    let Some(key) = key(program) else { return };
    let mut all = entries(root);
    all.insert(key, version.to_string());
    let Ok(text) = serde_json::to_vec(&all) else {
        return;
    };
    let temporary = root.join(format!(
        ".tfops-binary-versions.json.{}",
        std::process::id()
    ));
    if std::fs::write(&temporary, text).is_ok() && std::fs::rename(&temporary, file(root)).is_err()
    {
        let _ = std::fs::remove_file(&temporary);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_remembered_until_the_binary_changes() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let program = root.path().join("terraform");
        std::fs::write(&program, "#!/bin/sh\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read(root.path(), &program), None);
        write(root.path(), &program, "1.11.4");
        assert_eq!(read(root.path(), &program).as_deref(), Some("1.11.4"));
        // Another binary installed in its place (another size): asked again.
        std::fs::write(&program, "#!/bin/sh\nexit 0\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read(root.path(), &program), None);
        // Nothing to read or write where there is no binary.
        write(root.path(), &root.path().join("missing"), "1.0.0");
        assert_eq!(read(root.path(), &root.path().join("missing")), None);
    }
}
