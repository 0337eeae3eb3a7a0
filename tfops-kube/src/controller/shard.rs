//! Shards: which objects this manager reconciles. Objects carry an optional
//! [`SHARD_LABEL`]; a manager of shard `NAME` watches only objects labelled `NAME` (a label
//! selector, so the API server filters and the cache holds only this shard's objects), the
//! default shard only objects without the label.
//!
//! Moving an object between shards (changing its label) hands it over: the old shard's
//! watch sees it go, and a reconcile under way there is dropped, as a manager that lost its
//! leadership drops its reconciles (an apply goes on in the runner Pod, recorded in status
//! before it started, and the new shard attaches to it). The new shard starts nothing on a
//! runner that still runs a command of the old one (see `KubeRunnerPort::start`).

use tfops_core::api::SHARD_LABEL;

/// The shard a manager serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Shard {
    /// Objects without the label.
    #[default]
    Default,
    /// Objects labelled with this name.
    Named(String),
}

/// A shard name that cannot be a label value.
#[derive(Debug, thiserror::Error)]
#[error(
    "shard name {0:?} is not a label value: at most 63 characters, alphanumerics, '-', '_' or '.', beginning and ending with an alphanumeric"
)]
pub struct InvalidShard(pub String);

impl Shard {
    /// The shard named `name`; the empty name is the default shard.
    ///
    /// # Errors
    /// A name that is not a valid label value.
    pub fn parse(name: &str) -> Result<Self, InvalidShard> {
        if name.is_empty() {
            return Ok(Self::Default);
        }
        let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        let valid = name.len() <= 63
            && edge(name.chars().next())
            && edge(name.chars().last())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if valid {
            Ok(Self::Named(name.to_string()))
        } else {
            Err(InvalidShard(name.to_string()))
        }
    }

    /// The label selector of the shard's watches.
    pub fn selector(&self) -> String {
        match self {
            Self::Default => format!("!{SHARD_LABEL}"),
            Self::Named(name) => format!("{SHARD_LABEL}={name}"),
        }
    }

    /// Whether an object with these labels belongs to the shard.
    pub fn owns(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        match (self, labels.get(SHARD_LABEL)) {
            (Self::Default, None) => true,
            (Self::Named(name), Some(value)) => name == value,
            _ => false,
        }
    }

    /// The shard's name in logs and messages.
    pub fn describe(labels: &std::collections::BTreeMap<String, String>) -> String {
        labels
            .get(SHARD_LABEL)
            .map_or_else(|| "the default shard".into(), |n| format!("shard {n:?}"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn labels(shard: Option<&str>) -> BTreeMap<String, String> {
        shard
            .map(|s| (SHARD_LABEL.to_string(), s.to_string()))
            .into_iter()
            .collect()
    }

    #[test]
    fn each_object_belongs_to_exactly_one_shard() {
        let a = Shard::parse("a").unwrap();
        let default = Shard::parse("").unwrap();
        assert_eq!(default, Shard::Default);
        assert!(default.owns(&labels(None)) && !a.owns(&labels(None)));
        assert!(a.owns(&labels(Some("a"))) && !default.owns(&labels(Some("a"))));
        assert!(!a.owns(&labels(Some("b"))));
        // An empty value is a label, so not the default shard, and no named shard can have it.
        assert!(!default.owns(&labels(Some(""))));
        assert_eq!(a.selector(), "infra.argocd.io/shard=a");
        assert_eq!(default.selector(), "!infra.argocd.io/shard");
        assert_eq!(Shard::describe(&labels(None)), "the default shard");
    }

    #[test]
    fn shard_names_must_be_label_values() {
        for bad in ["-a", "a-", "a b", "ä", &"x".repeat(64)] {
            let e = Shard::parse(bad).unwrap_err();
            assert!(e.to_string().contains("not a label value"), "{bad}: {e}");
        }
        assert!(Shard::parse("eu-west.1_b").is_ok());
    }
}
