//! The API server's own checks of a `Terraform` spec, added to the generated CRD schema:
//! `x-kubernetes-validations` (CEL) rules and length limits, so that `kubectl apply` (and so
//! Argo CD's sync) refuses a bad object at once, naming the field and what is allowed, instead
//! of accepting it and reporting `Stalled` later. They restate checks of
//! `tfops_core::api::validate` (which still runs: for local mode, and for objects stored before
//! these rules); each message says the same thing as the reconciler's.

use serde_json::{Value, json};
use tfops_core::naming::{MAX_LABEL, PLAN_ID_SHA_LEN};

/// A Go duration (`30s`, `10m`, `1h30m`, `1.5h`, `0`), as `tfops_core::duration` reads it.
/// (Character classes rather than backslashes: a backslash in a CEL string is an escape.)
const DURATION: &str = "^(0|[+]?([0-9]+([.][0-9]+)?(ns|us|µs|ms|s|m|h))+)$";
const DURATION_MESSAGE: &str = "must be a Go duration such as 30s, 10m or 1h30m";
/// The longest duration text accepted (the CEL cost of a rule grows with it).
const DURATION_MAX: u64 = 32;

/// A rule on the schema node: `rule` must hold, else `message`. `field` (a JSON path from the
/// node, `.name`) names the field in the error when the rule is on its parent.
fn rule(rule: &str, message: &str, field: Option<&str>) -> Value {
    let mut r = json!({"rule": rule, "message": message});
    if let Some(f) = field {
        r["fieldPath"] = json!(f);
    }
    r
}

fn add_rules(node: &mut Value, rules: Vec<Value>) {
    let list = node.as_object_mut().map(|o| {
        o.entry("x-kubernetes-validations")
            .or_insert_with(|| json!([]))
    });
    if let Some(Value::Array(list)) = list {
        list.extend(rules);
    }
}

/// The schema node at `path` (property names, `[]` for array items), when there is one.
fn at<'a>(schema: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(schema, |node, step| {
        if *step == "[]" {
            node.get_mut("items")
        } else {
            node.get_mut("properties")?.get_mut(*step)
        }
    })
}

fn duration(schema: &mut Value, path: &[&str]) {
    if let Some(node) = at(schema, path) {
        node["maxLength"] = json!(DURATION_MAX);
        add_rules(
            node,
            vec![rule(
                &format!("self.matches('{DURATION}')"),
                DURATION_MESSAGE,
                None,
            )],
        );
    }
}

/// The rules of `spec.sourceRef`: a URL, revision fields that fit the source's kind, one
/// revision at most, each well formed.
fn source_rules(spec: &mut Value) {
    if let Some(source) = at(spec, &["sourceRef"]) {
        add_rules(
            source,
            vec![
                rule(
                    "size(self.url.trim()) > 0",
                    "must name the source: a Git URL, an oci:// reference, or a directory (Local)",
                    Some(".url"),
                ),
                rule(
                    "!has(self.ref) || !has(self.ref.digest) || self.kind == 'OCIRepository'",
                    "digest is for OCIRepository sources only",
                    Some(".ref.digest"),
                ),
                rule(
                    "!has(self.ref) || !(has(self.ref.branch) || has(self.ref.commit)) || self.kind == 'GitRepository'",
                    "branch and commit are for GitRepository sources only",
                    Some(".ref"),
                ),
                rule(
                    "!has(self.ref) || self.kind != 'Local' || !(has(self.ref.tag) || has(self.ref.semver))",
                    "a Local source takes no revision",
                    Some(".ref"),
                ),
            ],
        );
    }
    if let Some(reference) = at(spec, &["sourceRef", "ref"]) {
        add_rules(
            reference,
            vec![rule(
                "[has(self.branch), has(self.tag), has(self.semver), has(self.commit), has(self.digest)].filter(x, x).size() <= 1",
                "set only one of branch, tag, semver, commit, digest",
                None,
            )],
        );
        for (field, max, pattern, message) in [
            (
                "commit",
                40,
                "^[0-9a-f]{7,40}$",
                "must be a commit SHA of 7 to 40 hex digits",
            ),
            (
                "digest",
                71,
                "^sha256:[0-9a-f]{64}$",
                "must be sha256:<64 hex digits>",
            ),
        ] {
            if let Some(node) = at(reference, &[field]) {
                node["maxLength"] = json!(max);
                add_rules(
                    node,
                    vec![rule(&format!("self.matches('{pattern}')"), message, None)],
                );
            }
        }
        for field in ["branch", "tag", "semver"] {
            if let Some(node) = at(reference, &[field]) {
                node["maxLength"] = json!(255);
                add_rules(
                    node,
                    vec![rule(
                        "size(self.trim()) > 0",
                        "must not be empty when set",
                        None,
                    )],
                );
            }
        }
    }
}

/// Adds the rules to the structural schema of `spec`.
pub fn add_to_spec(spec: &mut Value) {
    duration(spec, &["interval"]);
    duration(spec, &["retryInterval"]);
    duration(spec, &["timeout"]);
    duration(spec, &["healthChecks", "[]", "timeout"]);
    if let Some(node) = at(spec, &["healthChecks"]) {
        // (Bounded so that the API server can bound the cost of the rules inside.)
        node["maxItems"] = json!(64);
    }

    let plan_id = format!("^plan-[a-z0-9]([-a-z0-9.]*[a-z0-9])?-[0-9a-f]{{{PLAN_ID_SHA_LEN}}}$");
    if let Some(node) = at(spec, &["approvePlan"]) {
        node["maxLength"] = json!(MAX_LABEL);
        add_rules(
            node,
            vec![rule(
                &format!("self == '' || self == 'auto' || self.matches('{plan_id}')"),
                "must be empty (approve each plan by its id), `auto`, or a plan id like plan-main-0123456789 (copy status.plan.pending)",
                None,
            )],
        );
    }

    source_rules(spec);

    add_rules(
        spec,
        vec![
            rule(
                "!(self.planOnly && self.force)",
                "conflicts with spec.planOnly, which never applies; unset one",
                Some(".force"),
            ),
            rule(
                "!(self.planOnly && self.approvePlan == 'auto')",
                "`auto` conflicts with spec.planOnly, which never applies; unset one",
                Some(".approvePlan"),
            ),
            rule(
                "!has(self.backendConfig) || !(self.backendConfig.disable && has(self.backendConfig.customConfiguration))",
                "disable and customConfiguration conflict; set one",
                Some(".backendConfig"),
            ),
        ],
    );
    if let Some(tfstate) = at(spec, &["tfstate"]) {
        add_rules(
            tfstate,
            vec![
                rule(
                    "self.forceUnlock != 'yes' || size(self.lockIdentifier) > 0",
                    "forceUnlock: yes needs the lock id to release (see status.lock.pending)",
                    Some(".lockIdentifier"),
                ),
                rule(
                    "self.forceUnlock == 'yes' || size(self.lockIdentifier) == 0",
                    "is only used with forceUnlock: yes",
                    Some(".lockIdentifier"),
                ),
            ],
        );
        if let Some(id) = at(tfstate, &["lockIdentifier"]) {
            id["maxLength"] = json!(128);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_duration_pattern_takes_what_the_core_parses_and_nothing_else() {
        let re = regex::Regex::new(DURATION).unwrap();
        for ok in ["0", "30s", "10m", "1h30m", "1.5h", "250ms", "+5m"] {
            assert!(re.is_match(ok), "{ok}");
            assert!(tfops_core::duration::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["abc", "", "10", "-5m", "5 m", "1d"] {
            assert!(!re.is_match(bad), "{bad}");
            assert!(tfops_core::duration::parse(bad).is_err(), "{bad}");
        }
    }
}
