//! Source trees as archives: building one for the runner, and extracting one safely.
//!
//! [`build_archive`] writes a tar + gzip of a directory, filtered by gitignore-style rules
//! (`spec.ignore`, a `.sourceignore` file at the root, and `.git/` always), and deterministic:
//! entries sorted by path, mtimes, owners and the gzip header fixed, modes reduced to `0644` or
//! `0755`. The same tree always gives the same bytes and SHA-256, which lets an unchanged
//! archive skip re-uploading.
//!
//! [`extract`] unpacks an archive from an untrusted source (an OCI layer, an upload) into a new
//! directory. It refuses absolute paths, `..` components, symlinks and hard links that could
//! lead outside the root, writes through symlinks, device and FIFO entries, and archives beyond
//! the configured limits ([`ExtractLimits`]). It extracts into a temporary directory beside the
//! destination and renames it into place only when every entry passed, so a rejected archive
//! leaves nothing behind; the error names the offending entry.

mod archive;
mod extract;
pub mod refs;
mod repository;
mod rules;
pub mod watch;

pub use archive::{ArchiveError, ArchiveSummary, build_archive};
pub use extract::{ExtractError, ExtractLimits, ExtractSummary, extract};
pub use repository::repository_id;
pub use rules::{IgnoreRules, SOURCEIGNORE};
pub use watch::{SourceChanges, Watched};
