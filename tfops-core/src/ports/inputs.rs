//! Inputs: variables, files and the CLI configuration, resolved from Secrets and ConfigMaps.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::api::{FileLocation, TerraformObject};

use super::PortError;

/// Inputs resolved from Secrets and ConfigMaps. Its `Debug` never shows values.
#[derive(Clone, Default, PartialEq)]
pub struct ResolvedInputs {
    /// Variables, by name, with JSON values (`vars`, `varsFrom`, and `values` as `values`).
    pub vars: BTreeMap<String, serde_json::Value>,
    /// Files to write.
    pub files: Vec<ResolvedFile>,
    /// The CLI configuration (`.tfrc`).
    pub cli_config: Option<Vec<u8>>,
}

impl std::fmt::Debug for ResolvedInputs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedInputs")
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .field(
                "files",
                &self.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
            )
            .field(
                "cli_config",
                &self.cli_config.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl ResolvedInputs {
    /// A SHA-256 of every input (variables, files with their locations, CLI config). It says
    /// whether inputs changed between runs without keeping any value: a rotated password in a
    /// `varsFrom` Secret changes it, and then the run plans instead of only checking drift.
    pub fn digest(&self) -> String {
        let mut parts: Vec<Vec<u8>> = Vec::new();
        for (name, value) in &self.vars {
            parts.push(b"var".to_vec());
            parts.push(name.as_bytes().to_vec());
            parts.push(crate::digest::canonical_json(value).into_bytes());
        }
        for file in &self.files {
            parts.push(b"file".to_vec());
            parts.push(format!("{:?}", file.location).into_bytes());
            parts.push(file.path.as_bytes().to_vec());
            parts.push(file.content.clone());
        }
        if let Some(config) = &self.cli_config {
            parts.push(b"cli-config".to_vec());
            parts.push(config.clone());
        }
        crate::digest::sha256_of_parts(parts.iter().map(Vec::as_slice))
    }
}

/// A file mapping with its content.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedFile {
    /// Workspace or home.
    pub location: FileLocation,
    /// Relative path.
    pub path: String,
    /// Content (secret: never logged).
    pub content: Vec<u8>,
}

/// Reads `vars`, `varsFrom`, `fileMappings` and `cliConfigSecretRef`.
#[async_trait]
pub trait InputsPort: Send + Sync {
    /// Resolves every input of the object.
    async fn resolve(&self, object: &TerraformObject) -> Result<ResolvedInputs, PortError>;
}
