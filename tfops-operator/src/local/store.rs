//! The state directory of local mode (`.tfops/` next to the manifest by default):
//!
//! ```text
//! manifests.json                         the manifest files last applied
//! objects/<ns>/<name>/object.json        generation, annotations, finalizers, deletion, status
//! objects/<ns>/<name>/terraform.tfstate  Terraform state (local backend), unless the object
//!                                        names its own backend
//! objects/<ns>/<name>/plan/              the pending plan: chunks, index.json last; readable.txt
//! objects/<ns>/<name>/outputs.json       writeOutputsToSecret (mode 0600)
//! objects/<ns>/<name>/outputs-configmap.json  writeOutputsToConfigMap (no sensitive output)
//! ```
//!
//! Every file is written to a temporary name and renamed, so a crash never leaves half a file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tfops_core::api::{ObjectKey, TerraformStatus};

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file or directory could not be read or written.
    #[error("state directory: {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another `tfops local` command holds the state directory.
    #[error(
        "state directory {path} is in use by another tfops command ({holder}); wait for it to finish, or stop it"
    )]
    Busy {
        /// The state directory.
        path: PathBuf,
        /// What the lock file says of its holder.
        holder: String,
    },
    /// A file holds something else than expected.
    #[error("state directory: {path} is damaged: {message}")]
    Damaged {
        /// The path.
        path: PathBuf,
        /// The parser's complaint.
        message: String,
    },
}

/// The state directory taken by one command ([`StateDir::lock`]); dropping it releases it.
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

/// What local mode keeps of an object between runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Persisted {
    /// Bumped whenever the spec read from the manifest changes.
    pub generation: i64,
    /// Digest of the spec of that generation.
    pub spec_digest: String,
    /// Annotations set by `tfops local` commands (approve, replan, unlock, reconcile).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Finalizers.
    #[serde(default)]
    pub finalizers: Vec<String>,
    /// When `tfops local destroy` asked for deletion.
    #[serde(default)]
    pub deletion_requested_at: Option<tfops_core::Timestamp>,
    /// The status as last written by the reconciler.
    #[serde(default)]
    pub status: TerraformStatus,
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `content` to `path` through a temporary file and a rename.
///
/// # Errors
/// [`StoreError::Io`].
pub fn write_atomic(path: &Path, content: &[u8], private: bool) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io("writing into", dir))?;
    if !private {
        use std::os::unix::fs::PermissionsExt;
        // Temporary files are created 0600; ordinary files get the usual 0644.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644))
            .map_err(io("writing", path))?;
    }
    tmp.write_all(content).map_err(io("writing", path))?;
    tmp.persist(path).map_err(|e| StoreError::Io {
        action: "replacing",
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// Removes a file or a directory tree; nothing there is fine.
///
/// # Errors
/// [`StoreError::Io`] for any other failure.
pub fn remove(path: &Path) -> Result<(), StoreError> {
    let result = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", path)(e)),
        _ => Ok(()),
    }
}

impl StateDir {
    /// Opens (creating) the directory and checks it is writable.
    ///
    /// # Errors
    /// [`StoreError::Io`] saying why it cannot be used.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(root).map_err(io("creating", root))?;
        let probe = root.join(".write-test");
        std::fs::write(&probe, b"ok").map_err(io("writing into", root))?;
        let _ = std::fs::remove_file(&probe);
        let root = std::fs::canonicalize(root).map_err(io("resolving", root))?;
        Ok(Self { root })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes the state directory for one command that changes it (an OS lock on
    /// `<dir>/lock`, released when the guard drops or the process dies), so that two commands
    /// never run Terraform in one directory at once. The lock file names its holder.
    ///
    /// # Errors
    /// [`StoreError::Busy`] naming the holder; [`StoreError::Io`].
    pub fn lock(&self, command: &str) -> Result<DirLock, StoreError> {
        use std::io::{Read, Seek, Write};
        let path = self.root.join("lock");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io("opening", &path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(StoreError::Busy {
                    path: self.root.clone(),
                    holder: holder.trim().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io("locking", &path)(e)),
        }
        let holder = format!(
            "pid {} running `{command}` since {}",
            std::process::id(),
            tfops_core::Timestamp::now()
        );
        file.set_len(0).map_err(io("writing", &path))?;
        file.rewind().map_err(io("writing", &path))?;
        file.write_all(holder.as_bytes())
            .map_err(io("writing", &path))?;
        Ok(DirLock { _file: file })
    }

    /// An object's directory.
    pub fn object_dir(&self, key: &ObjectKey) -> PathBuf {
        self.root
            .join("objects")
            .join(&key.namespace)
            .join(&key.name)
    }

    /// The Terraform state file of an object (local backend).
    pub fn state_file(&self, key: &ObjectKey) -> PathBuf {
        self.object_dir(key).join("terraform.tfstate")
    }

    /// The directory of an object's pending plan.
    pub fn plan_dir(&self, key: &ObjectKey) -> PathBuf {
        self.object_dir(key).join("plan")
    }

    /// The run history of an object (the last runs, newest first, as JSON).
    pub fn history_file(&self, key: &ObjectKey) -> PathBuf {
        self.object_dir(key).join("history.json")
    }

    /// The last runs of an object, newest first (none yet: empty).
    ///
    /// # Errors
    /// [`StoreError::Io`], [`StoreError::Damaged`].
    pub fn history(
        &self,
        key: &ObjectKey,
    ) -> Result<Vec<tfops_core::history::RunEntry>, StoreError> {
        let path = self.history_file(key);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("reading", &path)(e)),
        };
        serde_json::from_str(&text).map_err(|e| StoreError::Damaged {
            path: path.clone(),
            message: e.to_string(),
        })
    }

    /// Adds a run to the history of an object, keeping the last
    /// [`tfops_core::history::MAX_RUNS`]. A damaged history is replaced.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn record_run(
        &self,
        key: &ObjectKey,
        entry: tfops_core::history::RunEntry,
    ) -> Result<(), StoreError> {
        let mut runs = self.history(key).unwrap_or_default();
        tfops_core::history::record(&mut runs, entry);
        let json = serde_json::to_vec_pretty(&runs).map_err(|e| StoreError::Damaged {
            path: self.history_file(key),
            message: e.to_string(),
        })?;
        write_atomic(&self.history_file(key), &json, false)
    }

    /// The outputs file of an object.
    pub fn outputs_file(&self, key: &ObjectKey) -> PathBuf {
        self.object_dir(key).join("outputs.json")
    }

    /// The outputs ConfigMap file of an object (`spec.writeOutputsToConfigMap`).
    pub fn outputs_config_map_file(&self, key: &ObjectKey) -> PathBuf {
        self.object_dir(key).join("outputs-configmap.json")
    }

    /// What was kept of an object, if anything.
    ///
    /// # Errors
    /// [`StoreError`] when the file exists but cannot be read.
    pub fn load(&self, key: &ObjectKey) -> Result<Option<Persisted>, StoreError> {
        let path = self.object_dir(key).join("object.json");
        match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Damaged {
                        path,
                        message: e.to_string(),
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io("reading", &path)(e)),
        }
    }

    /// Keeps an object.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn save(&self, key: &ObjectKey, p: &Persisted) -> Result<(), StoreError> {
        let path = self.object_dir(key).join("object.json");
        let bytes = serde_json::to_vec_pretty(p).map_err(|e| StoreError::Damaged {
            path: path.clone(),
            message: e.to_string(),
        })?;
        write_atomic(&path, &bytes, false)
    }

    /// Forgets an object (after its finalizer is gone), keeping its Terraform state file.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn forget(&self, key: &ObjectKey) -> Result<(), StoreError> {
        let dir = self.object_dir(key);
        for path in [
            dir.join("object.json"),
            dir.join("outputs.json"),
            dir.join("outputs-configmap.json"),
            self.plan_dir(key),
        ] {
            remove(&path)?;
        }
        Ok(())
    }

    /// The objects kept, by key.
    pub fn keys(&self) -> Vec<ObjectKey> {
        let mut out = Vec::new();
        let Ok(namespaces) = std::fs::read_dir(self.root.join("objects")) else {
            return out;
        };
        for ns in namespaces.flatten() {
            let Ok(names) = std::fs::read_dir(ns.path()) else {
                continue;
            };
            for name in names.flatten() {
                if name.path().join("object.json").is_file() {
                    out.push(ObjectKey::new(
                        ns.file_name().to_string_lossy(),
                        name.file_name().to_string_lossy(),
                    ));
                }
            }
        }
        out.sort();
        out
    }

    /// The manifest files last applied.
    pub fn manifests(&self) -> Vec<PathBuf> {
        std::fs::read(self.root.join("manifests.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Remembers the manifest files applied.
    ///
    /// # Errors
    /// [`StoreError::Io`].
    pub fn set_manifests(&self, files: &[PathBuf]) -> Result<(), StoreError> {
        let abs: Vec<PathBuf> = files
            .iter()
            .map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.clone()))
            .collect();
        let bytes = serde_json::to_vec_pretty(&abs).unwrap_or_default();
        write_atomic(&self.root.join("manifests.json"), &bytes, false)
    }
}
