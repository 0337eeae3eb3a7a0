//! Label selectors, with the grammar of the real server's `labels.Parse`: `k=v`, `k==v`,
//! `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist), joined by `,`.

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
}
