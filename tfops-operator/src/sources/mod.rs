//! Sources the controller and local mode fetch: Git (git2). Credentials stay here and never
//! reach the runner, which only receives the archive.

pub mod git;
