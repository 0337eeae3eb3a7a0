use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the Terraform configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceRef {
    /// `GitRepository`, `OCIRepository`, or `Local` (a directory on the machine running tfops,
    /// for local mode only).
    pub kind: SourceKind,
    /// The repository URL (`https://`, `ssh://`, `git://`, `file://`), the OCI reference
    /// without tag (`oci://registry/repo`), or for `Local` a directory path.
    pub url: String,
    /// Which revision to use. Default: the `main` branch for Git, the `latest` tag for OCI.
    #[serde(default, rename = "ref")]
    pub reference: SourceRevisionRef,
    /// A Secret in the object's namespace with credentials for the source. Read by the
    /// controller only; never sent to the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<super::KeyRef>,
    /// Talk plain HTTP to an OCI registry (never for Git). Default false.
    #[serde(default)]
    pub insecure: bool,
    /// Git: also fetch the submodules the tree names, recursively. Default false: submodule
    /// directories stay empty.
    #[serde(default)]
    pub recurse_submodules: bool,
    /// Paths outside `spec.path` whose changes concern this object too (shared modules,
    /// common variable files): gitignore-style patterns relative to the source's root
    /// (`modules/network/`, `/common/*.tfvars`, `!modules/network/README.md`). A new revision
    /// is planned only when it changed a file under `spec.path` or matching one of these (or
    /// the object's spec or inputs changed); otherwise it is recorded as seen
    /// (`status.lastAttemptedRevision`) and the run goes on as if nothing had changed. Git
    /// compares the two commits' trees; OCI compares the artifacts' layer digests (any change
    /// of the artifact is a change). With `spec.path` at the root every change counts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watch_paths: Vec<String>,
    /// Plan the repository's open pull requests that touch this object (its `spec.path` or
    /// `watchPaths`), each at the pull request's head, and show the plans on the pull request
    /// (docs/pull-requests.md). Git over `http(s)://` only. Default: not planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_requests: Option<super::PullRequests>,
}

/// The kinds of source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SourceKind {
    /// A Git repository.
    GitRepository,
    /// An OCI artifact whose layer is a tar+gzip of the tree.
    #[serde(rename = "OCIRepository")]
    OciRepository,
    /// A local directory (local mode).
    Local,
}

/// Which revision of a source to use; at most one field may be set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceRevisionRef {
    /// A Git branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// A Git or OCI tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// A semver range over tags (`>=1.2.0 <2.0.0`, `~1.4`); the highest matching tag is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// An exact Git commit SHA (7 to 40 hex digits; 40 recommended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// An exact OCI manifest digest (`sha256:<64 hex>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl SourceRevisionRef {
    /// The fields that are set, as (field name, value).
    pub fn set_fields(&self) -> Vec<(&'static str, &str)> {
        [
            ("branch", &self.branch),
            ("tag", &self.tag),
            ("semver", &self.semver),
            ("commit", &self.commit),
            ("digest", &self.digest),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.as_deref().map(|v| (n, v)))
        .collect()
    }
}
