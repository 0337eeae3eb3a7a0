//! Label selectors, with the grammar of the real server's `labels.Parse`: `k=v`, `k==v`,
//! `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist), joined by `,`;
//! and field selectors (`k=v`, `k==v`, `k!=v`) on the fields each kind supports.

use std::collections::BTreeMap;

use super::errors::ApiError;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn terms(text: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect()
}

fn set(text: &str) -> Result<Vec<String>, ApiError> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{text}', expected: '('"
            ))
        })?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl LabelSelector {
    /// Parses `text`.
    ///
    /// # Errors
    /// 400 `BadRequest` naming the term that does not parse.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        for term in terms(text) {
            let r = if let Some(key) = term.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotIn(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::In(k.trim().to_string(), vec![v.trim().to_string()])
            } else if let Some((k, v)) = term.split_once(" notin ") {
                Requirement::NotIn(k.trim().to_string(), set(v)?)
            } else if let Some((k, v)) = term.split_once(" in ") {
                Requirement::In(k.trim().to_string(), set(v)?)
            } else if term
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(term.to_string())
            } else {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {term}"
                )));
            };
            out.push(r);
        }
        Ok(Self(out))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// Whether `object`'s `metadata.labels` satisfy it.
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        let labels: BTreeMap<String, String> = object["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }
}

/// A parsed field selector: `(field, value, equal)` terms, all of which must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, String, bool)>);

/// The fields a kind can be selected by besides `metadata.name` and `metadata.namespace`
/// (the real server's field label conversion functions, for the kinds served here).
fn kind_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
        ],
        "Secret" => &["type"],
        "Namespace" => &["status.phase"],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
        ],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `text` for objects of `kind`.
    ///
    /// # Errors
    /// 400 `BadRequest` for a term that does not parse or a field the kind cannot be selected
    /// by (`field label not supported: x`, as the real server says).
    pub fn parse(text: &str, kind: &str) -> Result<Self, ApiError> {
        let mut out = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, value, equal) = if let Some((k, v)) = term.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !matches!(field, "metadata.name" | "metadata.namespace")
                && !kind_fields(kind).contains(&field)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            out.push((field.to_string(), value.trim().to_string(), equal));
        }
        Ok(Self(out))
    }

    /// Whether `object` satisfies every term (a missing field reads as "").
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        self.0.iter().all(|(field, value, equal)| {
            let have = field
                .split('.')
                .fold(object, |v, part| &v[part])
                .as_str()
                .unwrap_or("");
            (have == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator_of_the_grammar() {
        let l = labels(&[("app", "tfops"), ("tier", "prod")]);
        for (selector, expected) in [
            ("", true),
            ("app=tfops", true),
            ("app==tfops", true),
            ("app!=tfops", false),
            ("app=other", false),
            ("tier in (prod, staging)", true),
            ("tier notin (prod)", false),
            ("tier,app", true),
            ("!tier", false),
            ("!missing", true),
            ("missing!=x", true),
            ("app=tfops,tier in (dev)", false),
        ] {
            assert_eq!(
                LabelSelector::parse(selector).unwrap().matches(&l),
                expected,
                "{selector}"
            );
        }
        assert_eq!(LabelSelector::parse("tier in prod").unwrap_err().code, 400);
    }

    #[test]
    fn field_selectors_take_the_fields_of_the_kind() {
        let pod = serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns"},
            "status": {"phase": "Running"},
        });
        let sel = |t: &str| FieldSelector::parse(t, "Pod").unwrap().matches_object(&pod);
        assert!(sel("metadata.name=a"));
        assert!(sel("metadata.name==a,status.phase=Running"));
        assert!(!sel("metadata.name!=a"));
        assert!(sel("spec.nodeName="));
        let e = FieldSelector::parse("spec.data=x", "Secret").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "field label not supported: spec.data")
        );
    }
}
