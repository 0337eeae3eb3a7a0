//! `tfops policy test DIR`: unit tests for plan policies, offline.
//!
//! `DIR` holds `TerraformPolicy` YAML files and `*.test.yaml` files of cases:
//!
//! ```yaml
//! cases:
//!   - name: deleting the database is denied
//!     plan: fixtures/delete-db.json        # terraform show -json output, relative to the file
//!     object: objects/orders.yaml          # optional: the Terraform object (spec, labels, ns)
//!     namespace: team-a                    # default: the object's, else each policy's own
//!     labels: { tier: prod }               # added to the object's labels, for selectors
//!     expect:
//!       keep-data/no-db-deletes: violated  # pass | violated | error | not-applicable
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tfops_core::api::{ObjectMeta, TerraformObject};
use tfops_core::policy::{Outcome, compile, evaluate};

/// Why policy tests could not run (a failed expectation is a result, not an error).
#[derive(Debug, thiserror::Error)]
pub enum PolicyTestError {
    /// A file could not be read or parsed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The policies could not be loaded.
    #[error(transparent)]
    Policies(#[from] crate::local::manifest::ManifestError),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    plan: PathBuf,
    #[serde(default)]
    object: Option<PathBuf>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    expect: BTreeMap<String, String>,
}

/// One expectation checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The case.
    pub case: String,
    /// `policy/rule`.
    pub rule: String,
    /// What the case expects.
    pub expected: String,
    /// What the rule did.
    pub got: String,
}

impl Checked {
    /// Whether the expectation holds.
    pub fn ok(&self) -> bool {
        self.expected == self.got
    }
}

fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Pass => "pass",
        Outcome::NotApplicable => "not-applicable",
        Outcome::Violation { .. } => "violated",
        Outcome::Error { .. } => "error",
    }
}

/// What a policy is evaluated against when no `Terraform` object is given: an object of
/// `namespace` with no labels and a spec naming only a local source.
pub fn object_in(namespace: &str) -> TerraformObject {
    // A constant document holding the one required field of the spec: it always parses.
    #[allow(clippy::expect_used)]
    let spec =
        serde_json::from_value(serde_json::json!({"sourceRef": {"kind": "Local", "url": "."}}))
            .expect("a spec with only a source parses");
    TerraformObject {
        metadata: ObjectMeta {
            name: "policy-test".into(),
            namespace: namespace.to_string(),
            ..ObjectMeta::default()
        },
        spec,
        status: Default::default(),
    }
}

fn err(path: &Path, message: impl ToString) -> PolicyTestError {
    PolicyTestError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Runs every case of every `*.test.yaml` in `dir` against the policies of the other YAML files.
///
/// # Errors
/// [`PolicyTestError`] for unreadable or invalid files (including broken policies).
pub fn run(dir: &Path) -> Result<Vec<Checked>, PolicyTestError> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| err(dir, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    entries.sort();
    let (tests, policies): (Vec<PathBuf>, Vec<PathBuf>) = entries
        .into_iter()
        .partition(|p| p.to_string_lossy().ends_with(".test.yaml"));
    let loaded = crate::local::manifest::read(&policies)?;
    let compiled = loaded
        .policies
        .iter()
        .map(compile)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(dir, e))?;
    let mut out = Vec::new();
    for file in tests {
        let text = std::fs::read_to_string(&file).map_err(|e| err(&file, e))?;
        let cases: Cases = serde_yaml_ng::from_str(&text).map_err(|e| err(&file, e))?;
        let base = file.parent().unwrap_or(dir);
        for case in cases.cases {
            let plan_path = base.join(&case.plan);
            let plan_text = std::fs::read_to_string(&plan_path).map_err(|e| err(&plan_path, e))?;
            let plan: serde_json::Value =
                serde_json::from_str(&plan_text).map_err(|e| err(&plan_path, e))?;
            let given = match &case.object {
                Some(path) => {
                    let path = base.join(path);
                    let read = crate::local::manifest::read(std::slice::from_ref(&path))?;
                    let Some(m) = read.objects.first() else {
                        return Err(err(&path, "holds no Terraform object"));
                    };
                    Some(m.object())
                }
                None => None,
            };
            let mut results = BTreeMap::new();
            for p in &compiled {
                let mut object = match &given {
                    Some(o) => o.clone(),
                    None => object_in(&p.namespace),
                };
                if let Some(ns) = &case.namespace {
                    object.metadata.namespace = ns.clone();
                }
                object.metadata.labels.extend(case.labels.clone());
                let verdict = evaluate(std::slice::from_ref(p), &plan, &object)
                    .map_err(|e| err(&plan_path, e))?;
                for r in verdict.results {
                    results.insert(
                        format!("{}/{}", r.policy, r.rule),
                        outcome_name(&r.outcome).to_string(),
                    );
                }
            }
            for (rule, expected) in case.expect {
                let got = results
                    .get(&rule)
                    .cloned()
                    .unwrap_or_else(|| "not-selected".into());
                out.push(Checked {
                    case: case.name.clone(),
                    rule,
                    expected,
                    got,
                });
            }
        }
    }
    Ok(out)
}
