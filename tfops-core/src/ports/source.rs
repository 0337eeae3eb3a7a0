//! Sources: the revision to run and its tree, archived.

use std::sync::Arc;

use async_trait::async_trait;

use crate::api::{ObjectKey, SourceRef};
use crate::source::SourceChanges;

use super::PortError;

/// A resolved source revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revision {
    /// The ref it was resolved from (`main`, `v1.2.0`, `latest`).
    pub reference: String,
    /// `sha1:<hex>` for Git, `sha256:<hex>` for OCI.
    pub digest: String,
}

impl Revision {
    /// A revision as status records it (`<reference>@<digest>`, [`Revision`]'s `Display`);
    /// `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        let (reference, digest) = text.rsplit_once('@')?;
        let (algorithm, hex) = digest.split_once(':')?;
        let known = matches!(algorithm, "sha1" | "sha256")
            && !hex.is_empty()
            && hex.bytes().all(|b| b.is_ascii_hexdigit());
        known.then(|| Self {
            reference: reference.to_string(),
            digest: digest.to_string(),
        })
    }

    /// The hex part of the digest.
    pub fn sha(&self) -> &str {
        self.digest
            .split_once(':')
            .map_or(self.digest.as_str(), |(_, h)| h)
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.reference, self.digest)
    }
}

/// A source tree archived for the runner (tar + gzip, filtered by `ignore`).
#[derive(Clone, PartialEq, Eq)]
pub struct Artifact {
    /// SHA-256 of `data`, hex.
    pub sha256: String,
    /// The archive.
    pub data: Arc<Vec<u8>>,
}

impl std::fmt::Debug for Artifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Artifact")
            .field("sha256", &self.sha256)
            .field("len", &self.data.len())
            .finish()
    }
}

/// Resolves and fetches sources. Credentials stay behind this port, never reaching the runner.
#[async_trait]
pub trait SourcePort: Send + Sync {
    /// The current revision of the source (like `git ls-remote`, or an OCI manifest digest).
    async fn resolve(&self, object: &ObjectKey, source: &SourceRef) -> Result<Revision, PortError>;
    /// The tree at `revision`, filtered by `ignore` and archived.
    async fn fetch(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        revision: &Revision,
        ignore: Option<&str>,
    ) -> Result<Artifact, PortError>;

    /// What changed between `from` (a revision an earlier run used) and `to` (the one resolved
    /// in this run): the paths that differ, or that the trees are the same, or
    /// [`SourceChanges::Unknown`] when this source cannot tell (the default), which counts as
    /// a change of everything.
    async fn changes(
        &self,
        object: &ObjectKey,
        source: &SourceRef,
        from: &Revision,
        to: &Revision,
    ) -> Result<SourceChanges, PortError> {
        let _ = (object, source, from, to);
        Ok(SourceChanges::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::Revision;

    #[test]
    fn a_revision_reads_back_from_its_text() {
        let r = Revision {
            reference: "release/v1@x".into(),
            digest: "sha1:0123abcd".into(),
        };
        assert_eq!(Revision::parse(&r.to_string()), Some(r));
        assert_eq!(Revision::parse("main"), None);
        assert_eq!(Revision::parse("main@md5:00"), None);
        assert_eq!(Revision::parse("main@sha1:xyz"), None);
    }
}
