use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A reference to an object by name, in the `Terraform` object's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyRef {
    /// The object's name.
    pub name: String,
}

/// A key of a Secret or ConfigMap in the object's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// The Secret's (or ConfigMap's) name.
    pub name: String,
    /// The key.
    pub key: String,
    /// Succeed with the variable unset when the object or key does not exist. Default false.
    #[serde(default)]
    pub optional: bool,
}

/// An input variable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variable {
    /// The variable's name in the configuration.
    pub name: String,
    /// The value: any JSON (string, number, bool, list, object). Exactly one of `value` and
    /// `valueFrom` must be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
    pub value: Option<serde_json::Value>,
    /// Where to read the value from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

/// A variable's value read from a Secret or ConfigMap key. The key's text is used as a JSON
/// value when it parses as one, and as a string otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueFrom {
    /// A Secret key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// A ConfigMap key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<SecretKeyRef>,
}

/// Variables read from the keys of a Secret or ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VarsFrom {
    /// `Secret` or `ConfigMap`.
    pub kind: VarsFromKind,
    /// The object's name, in the `Terraform` object's namespace.
    pub name: String,
    /// The keys to read, each `key` or `key:variable_name`. Default: every key, each as the
    /// variable of the same name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub var_keys: Vec<String>,
    /// Go on without these variables when the object does not exist. Default false.
    #[serde(default)]
    pub optional: bool,
}

/// The kinds `varsFrom` reads.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum VarsFromKind {
    /// A Secret.
    Secret,
    /// A ConfigMap.
    ConfigMap,
}

/// A file written into the runner from a Secret key: a credentials file, a kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileMapping {
    /// The Secret key holding the content.
    pub secret_key_ref: SecretKeyRef,
    /// `workspace` (the configuration directory) or `home` (the runner's home directory).
    pub location: FileLocation,
    /// The file's path relative to that location; it must stay inside it.
    pub path: String,
}

/// Where a mapped file goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FileLocation {
    /// The configuration directory.
    Workspace,
    /// The runner's home directory.
    Home,
}
