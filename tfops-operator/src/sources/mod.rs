//! Sources the controller and local mode fetch: Git (git2) and OCI artifacts (oci-client). Credentials stay here and never
//! reach the runner, which only receives the archive.

mod archives;
pub mod git;
pub mod oci;
pub mod port;

pub use port::{CredentialSource, RemoteSources};
