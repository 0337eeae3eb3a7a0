use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A `TerraformPolicy` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TerraformPolicy {
    /// Name, namespace, labels.
    pub metadata: PolicyMeta,
    /// The policy.
    pub spec: TerraformPolicySpec,
}

impl TerraformPolicy {
    /// Whether this policy applies to `object` (decided before its rules are compiled, so a
    /// broken policy only blocks the objects it selects).
    pub fn selects(&self, object: &crate::api::TerraformObject) -> bool {
        selected(&self.metadata.namespace, &self.spec.selector, object)
    }
}

/// The metadata a policy needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyMeta {
    /// Name.
    pub name: String,
    /// Namespace (a policy applies to objects of its own namespace).
    #[serde(default)]
    pub namespace: String,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// What a policy checks and for whom.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TerraformPolicySpec {
    /// Labels the `Terraform` objects must carry; empty selects every object of the namespace.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    /// Named CEL expressions computed once, in order, usable by later variables and rules.
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    /// The rules.
    pub rules: Vec<Rule>,
}

/// A named CEL expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamedExpression {
    /// Its name.
    pub name: String,
    /// The CEL expression.
    pub expression: String,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rule {
    /// Its name.
    pub name: String,
    /// A CEL expression that must be true.
    pub expression: String,
    /// The message when it is not.
    #[serde(default)]
    pub message: String,
    /// A CEL string expression for the message (wins over `message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_expression: Option<String>,
    /// `Deny` blocks the apply; `Warn` only reports. Default `Deny`.
    #[serde(default)]
    pub action: Action,
    /// `Plan` (once per plan, the default) or `Resource` (once per change, as `change`).
    #[serde(default)]
    pub scope: Scope,
    /// CEL expressions that must all be true for the rule to apply (e.g. only some resource
    /// types); evaluated in the rule's scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<NamedExpression>,
}

/// What a violation does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Action {
    /// Block the apply.
    #[default]
    Deny,
    /// Report only.
    Warn,
}

/// How often a rule runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Scope {
    /// Once per plan.
    #[default]
    Plan,
    /// Once per resource change, with the change as `change`.
    Resource,
}

/// Whether a policy of `namespace` with `selector` applies to `object` (an empty namespace:
/// a policy read from a file without one, which applies to any object).
pub(super) fn selected(
    namespace: &str,
    selector: &std::collections::BTreeMap<String, String>,
    object: &crate::api::TerraformObject,
) -> bool {
    (namespace.is_empty() || namespace == object.metadata.namespace)
        && selector
            .iter()
            .all(|(k, v)| object.metadata.labels.get(k) == Some(v))
}
