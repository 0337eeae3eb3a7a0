//! Extracting an untrusted tar + gzip archive without letting it write outside its root.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

/// Bounds on what an archive may contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractLimits {
    /// Total bytes of regular files.
    pub max_total_bytes: u64,
    /// Number of entries.
    pub max_entries: u64,
    /// Bytes of one entry's path.
    pub max_path_len: usize,
}

impl Default for ExtractLimits {
    /// 1 GiB, 100,000 entries, 1,024-byte paths: far above Terraform configurations, far below
    /// what would exhaust a runner's disk.
    fn default() -> Self {
        Self {
            max_total_bytes: 1 << 30,
            max_entries: 100_000,
            max_path_len: 1024,
        }
    }
}

/// What was extracted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtractSummary {
    /// Entries read.
    pub entries: u64,
    /// Regular files written.
    pub files: u64,
    /// Their total size.
    pub bytes: u64,
}

/// Why an archive was refused. Each names the entry (as written in the archive).
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The destination already exists and is not an empty directory.
    #[error("destination {0} already exists")]
    DestinationExists(PathBuf),
    /// The archive is not a valid tar + gzip stream.
    #[error("archive is corrupt: {0}")]
    Corrupt(String),
    /// An entry has an absolute path.
    #[error("entry {entry:?} has an absolute path")]
    AbsolutePath {
        /// The entry.
        entry: String,
    },
    /// An entry's path contains `..`.
    #[error("entry {entry:?} contains '..'")]
    ParentTraversal {
        /// The entry.
        entry: String,
    },
    /// An entry's path is empty or contains a NUL byte.
    #[error("entry {entry:?} has an invalid path")]
    InvalidPath {
        /// The entry.
        entry: String,
    },
    /// An entry's path is too long.
    #[error("entry {entry:?} has a path of {len} bytes (limit {limit})")]
    PathTooLong {
        /// The entry.
        entry: String,
        /// Its length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A symlink would point outside the root (or is absolute).
    #[error("symlink {entry:?} points outside the archive root ({target:?})")]
    SymlinkEscapes {
        /// The entry.
        entry: String,
        /// Its target.
        target: String,
    },
    /// A hard link names something that is not a file extracted before it.
    #[error("hard link {entry:?} targets {target:?}, which is not a file extracted before it")]
    HardLinkTarget {
        /// The entry.
        entry: String,
        /// Its target.
        target: String,
    },
    /// An entry would be written through (or over) a symlink.
    #[error("entry {entry:?} would be written through a symlink")]
    ThroughSymlink {
        /// The entry.
        entry: String,
    },
    /// A device, FIFO or other special entry.
    #[error("entry {entry:?} is a {kind}, which is not allowed")]
    SpecialFile {
        /// The entry.
        entry: String,
        /// What it is.
        kind: &'static str,
    },
    /// More entries than allowed.
    #[error("archive has more than {limit} entries")]
    TooManyEntries {
        /// The limit.
        limit: u64,
    },
    /// More bytes than allowed.
    #[error("entry {entry:?} takes the archive past {limit} bytes")]
    TooLarge {
        /// The entry.
        entry: String,
        /// The limit.
        limit: u64,
    },
    /// Writing the entry failed.
    #[error("writing entry {entry:?}")]
    Io {
        /// The entry.
        entry: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn display(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A path from an archive, checked: relative, no `..`, within limits. `.` parts are dropped.
fn checked_path(raw: &[u8], limits: &ExtractLimits) -> Result<PathBuf, ExtractError> {
    use std::os::unix::ffi::OsStrExt;
    let entry = display(raw);
    if raw.len() > limits.max_path_len {
        return Err(ExtractError::PathTooLong {
            entry,
            len: raw.len(),
            limit: limits.max_path_len,
        });
    }
    if raw.contains(&0) {
        return Err(ExtractError::InvalidPath { entry });
    }
    let mut out = PathBuf::new();
    for c in Path::new(std::ffi::OsStr::from_bytes(raw)).components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(ExtractError::ParentTraversal { entry }),
            Component::RootDir | Component::Prefix(_) => {
                return Err(ExtractError::AbsolutePath { entry });
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err(ExtractError::InvalidPath { entry });
    }
    Ok(out)
}

/// A symlink target is safe when it is relative, all its `..` come first (resolved from the
/// link's own directory, which is a real directory), and they do not climb above the root.
/// Descending afterwards only passes through other links that obey the same rule.
fn symlink_stays_inside(link: &Path, target: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if target.is_empty() || target.contains(&0) {
        return false;
    }
    let depth = link.components().count().saturating_sub(1);
    let mut ups = 0usize;
    let mut descended = false;
    for c in Path::new(std::ffi::OsStr::from_bytes(target)).components() {
        match c {
            Component::ParentDir if !descended => ups += 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
            Component::CurDir => {}
            Component::Normal(_) => descended = true,
        }
    }
    ups <= depth
}

struct Extraction<'a> {
    root: &'a Path,
    limits: ExtractLimits,
    symlinks: BTreeSet<PathBuf>,
    files: BTreeSet<PathBuf>,
    summary: ExtractSummary,
}

impl Extraction<'_> {
    /// Refuses a path that is, or passes through, a symlink extracted earlier.
    fn not_through_symlink(&self, path: &Path, entry: &str) -> Result<(), ExtractError> {
        let mut prefix = PathBuf::new();
        for c in path.components() {
            prefix.push(c);
            if self.symlinks.contains(&prefix) {
                return Err(ExtractError::ThroughSymlink {
                    entry: entry.to_string(),
                });
            }
        }
        Ok(())
    }

    fn io(entry: &str) -> impl FnOnce(io::Error) -> ExtractError + '_ {
        move |source| ExtractError::Io {
            entry: entry.to_string(),
            source,
        }
    }

    fn parent_dirs(&self, path: &Path, entry: &str) -> Result<(), ExtractError> {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(self.root.join(parent)).map_err(Self::io(entry))?;
        }
        Ok(())
    }

    /// Removes whatever a previous entry left at `path` (later entries win, as in tar), unless
    /// it is a directory that a file would replace.
    fn clear(&self, path: &Path, entry: &str) -> Result<(), ExtractError> {
        let full = self.root.join(path);
        match fs::symlink_metadata(&full) {
            Ok(m) if m.is_dir() => Err(ExtractError::Io {
                entry: entry.to_string(),
                source: io::Error::new(io::ErrorKind::AlreadyExists, "a directory is in the way"),
            }),
            Ok(_) => fs::remove_file(&full).map_err(Self::io(entry)),
            Err(_) => Ok(()),
        }
    }

    /// Makes the place for `path`: its parent directories, and nothing left there by an
    /// earlier entry ([`Self::clear`]).
    fn make_room(&self, path: &Path, entry: &str) -> Result<(), ExtractError> {
        self.parent_dirs(path, entry)?;
        self.clear(path, entry)
    }

    /// A symbolic link, whose target must stay inside the destination.
    fn symlink<R: Read>(
        &mut self,
        e: &tar::Entry<'_, R>,
        path: PathBuf,
        entry: String,
        full: &Path,
    ) -> Result<(), ExtractError> {
        use std::os::unix::ffi::OsStrExt;
        let target = link_name(e);
        if !symlink_stays_inside(&path, &target) {
            return Err(ExtractError::SymlinkEscapes {
                entry,
                target: display(&target),
            });
        }
        self.make_room(&path, &entry)?;
        std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), full)
            .map_err(Self::io(&entry))?;
        self.files.remove(&path);
        self.symlinks.insert(path);
        Ok(())
    }

    /// A hard link, only to a regular file extracted before it.
    fn hard_link<R: Read>(
        &mut self,
        e: &tar::Entry<'_, R>,
        path: PathBuf,
        entry: String,
        full: &Path,
    ) -> Result<(), ExtractError> {
        let target_raw = link_name(e);
        let target =
            checked_path(&target_raw, &self.limits).map_err(|_| ExtractError::HardLinkTarget {
                entry: entry.clone(),
                target: display(&target_raw),
            })?;
        if !self.files.contains(&target) || target == path {
            return Err(ExtractError::HardLinkTarget {
                entry,
                target: display(&target_raw),
            });
        }
        self.make_room(&path, &entry)?;
        fs::hard_link(self.root.join(&target), full).map_err(Self::io(&entry))?;
        self.files.insert(path);
        Ok(())
    }

    /// A regular file, within the size limit, with only its executable bits kept.
    fn regular<R: Read>(
        &mut self,
        e: &mut tar::Entry<'_, R>,
        path: PathBuf,
        entry: String,
        full: &Path,
    ) -> Result<(), ExtractError> {
        let size = e.size();
        self.summary.bytes = self.summary.bytes.saturating_add(size);
        if self.summary.bytes > self.limits.max_total_bytes {
            return Err(ExtractError::TooLarge {
                entry,
                limit: self.limits.max_total_bytes,
            });
        }
        self.make_room(&path, &entry)?;
        let mode = e.header().mode().unwrap_or(0o644);
        let mut out = fs::File::create_new(full).map_err(Self::io(&entry))?;
        io::copy(&mut e.take(size), &mut out).map_err(Self::io(&entry))?;
        use std::os::unix::fs::PermissionsExt;
        // Keep only the executable bits; never setuid, setgid or sticky.
        let perms = if mode & 0o111 != 0 { 0o755 } else { 0o644 };
        fs::set_permissions(full, fs::Permissions::from_mode(perms)).map_err(Self::io(&entry))?;
        self.summary.files += 1;
        self.files.insert(path);
        Ok(())
    }

    fn entry<R: Read>(&mut self, mut e: tar::Entry<'_, R>) -> Result<(), ExtractError> {
        self.summary.entries += 1;
        if self.summary.entries > self.limits.max_entries {
            return Err(ExtractError::TooManyEntries {
                limit: self.limits.max_entries,
            });
        }
        let raw = e.path_bytes().into_owned();
        let entry = display(&raw);
        let kind = e.header().entry_type();
        let special = match kind {
            tar::EntryType::Char => Some("character device"),
            tar::EntryType::Block => Some("block device"),
            tar::EntryType::Fifo => Some("FIFO"),
            tar::EntryType::GNUSparse => Some("sparse file"),
            _ => None,
        };
        if let Some(kind) = special {
            return Err(ExtractError::SpecialFile { entry, kind });
        }
        if matches!(
            kind,
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader
        ) {
            return Ok(());
        }
        // The archive's root itself, as GNU `tar -C dir -c .` (`./`) and Flux's OCI artifact
        // builder (`.`) write it first: the destination is that directory already. Only a
        // directory of exactly that name; anything else with an empty path stays refused.
        if kind == tar::EntryType::Directory && (raw == b"." || raw == b"./") {
            return Ok(());
        }
        let path = checked_path(&raw, &self.limits)?;
        self.not_through_symlink(&path, &entry)?;
        let full = self.root.join(&path);
        match kind {
            tar::EntryType::Directory => {
                fs::create_dir_all(&full).map_err(Self::io(&entry))?;
            }
            tar::EntryType::Symlink => self.symlink(&e, path, entry, &full)?,
            tar::EntryType::Link => self.hard_link(&e, path, entry, &full)?,
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                self.regular(&mut e, path, entry, &full)?;
            }
            _ => {
                return Err(ExtractError::SpecialFile {
                    entry,
                    kind: "unsupported entry type",
                });
            }
        }
        Ok(())
    }
}

/// The target a link entry names, as written (empty when it names none).
fn link_name<R: Read>(e: &tar::Entry<'_, R>) -> Vec<u8> {
    e.link_name_bytes()
        .map(|t| t.into_owned())
        .unwrap_or_default()
}

/// Extracts the tar + gzip `archive` into `destination`, which must not exist yet (or be an
/// empty directory). Nothing is left at `destination` unless every entry was accepted.
///
/// # Errors
/// An [`ExtractError`] naming the first entry refused, or the I/O failure.
pub fn extract<R: Read>(
    archive: R,
    destination: &Path,
    limits: ExtractLimits,
) -> Result<ExtractSummary, ExtractError> {
    let exists_empty = match fs::read_dir(destination) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(ExtractError::DestinationExists(destination.to_path_buf()));
            }
            true
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(_) => return Err(ExtractError::DestinationExists(destination.to_path_buf())),
    };
    let parent = destination
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staging = tempfile::Builder::new()
        .prefix(".tfops-extract-")
        .tempdir_in(parent)
        .map_err(|source| ExtractError::Io {
            entry: String::new(),
            source,
        })?;
    let mut run = Extraction {
        root: staging.path(),
        limits,
        symlinks: BTreeSet::new(),
        files: BTreeSet::new(),
        summary: ExtractSummary::default(),
    };
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(archive));
    let entries = tar
        .entries()
        .map_err(|e| ExtractError::Corrupt(e.to_string()))?;
    for e in entries {
        let e = e.map_err(|e| ExtractError::Corrupt(e.to_string()))?;
        run.entry(e)?;
    }
    let summary = run.summary;
    if exists_empty {
        fs::remove_dir(destination).map_err(|source| ExtractError::Io {
            entry: String::new(),
            source,
        })?;
    }
    let staged = staging.keep();
    fs::rename(&staged, destination).map_err(|source| {
        let _ = fs::remove_dir_all(&staged);
        ExtractError::Io {
            entry: String::new(),
            source,
        }
    })?;
    Ok(summary)
}
