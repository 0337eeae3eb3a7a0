//! Building a deterministic tar + gzip archive of a source tree.

use std::fs;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::IgnoreRules;
use crate::plan::hex;

/// Why an archive could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Reading the tree or writing the archive failed.
    #[error("reading {path} for the source archive")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// An ignore line is not a valid gitignore pattern.
    #[error("invalid ignore rule {0}")]
    IgnoreRule(String),
    /// A symlink in the tree points outside it (or is absolute).
    #[error("symlink {path} points outside the source tree ({target})")]
    SymlinkEscapes {
        /// The link, relative to the root.
        path: PathBuf,
        /// Its target.
        target: PathBuf,
    },
    /// The root is not a directory.
    #[error("source root {0} is not a directory")]
    NotADirectory(PathBuf),
}

/// What was archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSummary {
    /// SHA-256 of the archive bytes, hex.
    pub sha256: String,
    /// Size of the archive (compressed), in bytes.
    pub size: u64,
    /// Regular files archived.
    pub files: u64,
    /// Their total size, uncompressed.
    pub file_bytes: u64,
    /// Special files (sockets, FIFOs, devices) left out.
    pub skipped: Vec<PathBuf>,
}

struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Walk<'a, W: Write> {
    root: &'a Path,
    rules: &'a IgnoreRules,
    tar: tar::Builder<W>,
    summary: ArchiveSummary,
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h
}

impl<W: Write> Walk<'_, W> {
    fn dir(&mut self, relative: &Path) -> Result<(), ArchiveError> {
        let full = self.root.join(relative);
        let mut entries: Vec<_> = fs::read_dir(&full)
            .map_err(io_at(&full))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(io_at(&full))?;
        entries.sort();
        for name in entries {
            let rel = relative.join(&name);
            let path = self.root.join(&rel);
            let meta = fs::symlink_metadata(&path).map_err(io_at(&path))?;
            let kind = meta.file_type();
            if self.rules.excludes(&rel, kind.is_dir()) {
                continue;
            }
            if kind.is_dir() {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                self.tar
                    .append_data(&mut h, &rel, io::empty())
                    .map_err(io_at(&path))?;
                self.dir(&rel)?;
            } else if kind.is_file() {
                self.file(&rel, &path, &meta)?;
            } else if kind.is_symlink() {
                self.symlink(&rel, &path)?;
            } else {
                self.summary.skipped.push(rel);
            }
        }
        Ok(())
    }

    fn file(&mut self, rel: &Path, path: &Path, meta: &fs::Metadata) -> Result<(), ArchiveError> {
        use std::os::unix::fs::PermissionsExt;
        let executable = meta.permissions().mode() & 0o111 != 0;
        let file = fs::File::open(path).map_err(io_at(path))?;
        let mut h = header(
            tar::EntryType::Regular,
            if executable { 0o755 } else { 0o644 },
            meta.len(),
        );
        self.tar
            .append_data(&mut h, rel, file)
            .map_err(io_at(path))?;
        self.summary.files += 1;
        self.summary.file_bytes += meta.len();
        Ok(())
    }

    fn symlink(&mut self, rel: &Path, path: &Path) -> Result<(), ArchiveError> {
        let target = fs::read_link(path).map_err(io_at(path))?;
        if !stays_inside(rel, &target) {
            return Err(ArchiveError::SymlinkEscapes {
                path: rel.to_path_buf(),
                target,
            });
        }
        let mut h = header(tar::EntryType::Symlink, 0o777, 0);
        self.tar
            .append_link(&mut h, rel, &target)
            .map_err(io_at(path))?;
        Ok(())
    }
}

/// Whether a relative symlink at `link` (relative to the root) resolves inside the root,
/// judged on its text.
fn stays_inside(link: &Path, target: &Path) -> bool {
    let mut depth = link.components().count().saturating_sub(1) as i64;
    for c in target.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Archives the tree at `root` into `out` (tar + gzip), excluding what `ignore` (the object's
/// `spec.ignore` lines), `root/.sourceignore` and `.git/` exclude. The bytes depend only on the
/// tree's paths, contents, executable bits and symlink targets.
///
/// # Errors
/// An [`ArchiveError`] naming the path that could not be read or archived.
pub fn build_archive<W: Write>(
    root: &Path,
    ignore: Option<&str>,
    out: W,
) -> Result<ArchiveSummary, ArchiveError> {
    if !root.is_dir() {
        return Err(ArchiveError::NotADirectory(root.to_path_buf()));
    }
    let rules = IgnoreRules::new(root, ignore)?;
    let hashing = HashingWriter {
        inner: out,
        hasher: Sha256::new(),
        len: 0,
    };
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(3)
        .write(hashing, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    tar.follow_symlinks(false);
    let mut walk = Walk {
        root,
        rules: &rules,
        tar,
        summary: ArchiveSummary {
            sha256: String::new(),
            size: 0,
            files: 0,
            file_bytes: 0,
            skipped: Vec::new(),
        },
    };
    walk.dir(Path::new(""))?;
    let Walk {
        tar, mut summary, ..
    } = walk;
    let gz = tar.into_inner().map_err(io_at(root))?;
    let mut hashing = gz.finish().map_err(io_at(root))?;
    hashing.flush().map_err(io_at(root))?;
    summary.sha256 = hex(&hashing.hasher.finalize());
    summary.size = hashing.len;
    Ok(summary)
}
