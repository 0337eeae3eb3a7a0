//! The test of the Lua harness itself: every case of Argo CD's own `resource_customizations`
//! suite (its `health_test.yaml` and `actions/action_test.yaml` files, read from the Go module
//! cache of the pinned release at test time, never committed) runs through `tests::argocd_lua`
//! as Argo CD's own Go tests run it: health and discovery with every library open, actions as
//! the API server runs them (no open libraries). A harness that passes these runs Lua as Argo CD
//! does; the comparison rules are Argo CD's test's (named at each).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use tests::argocd_lua::{ARGOCD_VERSION, ArgoLua, Libraries};

/// `$TFOPS_ARGOCD_CUSTOMIZATIONS`, else the pinned Argo CD module in Go's module cache
/// (`scripts/install-argocd` downloads it).
fn suite() -> PathBuf {
    if let Some(dir) = std::env::var_os("TFOPS_ARGOCD_CUSTOMIZATIONS") {
        return PathBuf::from(dir);
    }
    let out = std::process::Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .expect("go env GOMODCACHE");
    let cache = String::from_utf8(out.stdout).unwrap();
    PathBuf::from(cache.trim())
        .join(format!("github.com/argoproj/argo-cd/v3@v{ARGOCD_VERSION}"))
        .join("resource_customizations")
}

fn files_named(root: &Path, name: &str, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e} (scripts/install-argocd)", root.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_named(&path, name, found);
        } else if path.file_name().is_some_and(|n| n == name) {
            found.push(path);
        }
    }
}

/// The first YAML document of `path` (Argo CD's YAML reading takes the first of several).
fn yaml<T: for<'de> Deserialize<'de>>(path: &Path) -> T {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let first = serde_yaml_ng::Deserializer::from_str(&text)
        .next()
        .unwrap_or_else(|| panic!("{}: no YAML document", path.display()));
    T::deserialize(first).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[derive(Deserialize)]
struct HealthTests {
    tests: Vec<HealthCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthCase {
    // Argo CD reads these files with Go's JSON rules, where field names match without regard
    // to case: one of its files spells it `inputpath`.
    #[serde(alias = "inputpath")]
    input_path: String,
    health_status: Option<Expected>,
}

#[derive(Deserialize)]
struct Expected {
    #[serde(default)]
    status: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActionTests {
    #[serde(default)]
    discovery_tests: Vec<DiscoveryCase>,
    #[serde(default)]
    action_tests: Vec<ActionCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DiscoveryCase {
    input_path: String,
    #[serde(default)]
    result: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActionCase {
    action: String,
    input_path: String,
    #[serde(default)]
    expected_output_path: String,
    #[serde(default)]
    expected_error_message: String,
    #[serde(default)]
    parameters: BTreeMap<String, String>,
}

/// Cases run and the misses, each with why.
#[derive(Default)]
struct Tally {
    ran: usize,
    misses: Vec<String>,
}

impl Tally {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.ran += 1;
        if !ok {
            self.misses.push(what());
        }
    }
}

#[test]
fn every_health_case_of_argo_cds_own_suite() {
    let root = suite();
    let mut files = Vec::new();
    files_named(&root, "health_test.yaml", &mut files);
    let mut lua = ArgoLua::start().unwrap();
    let mut tally = Tally::default();
    for file in &files {
        let dir = file.parent().unwrap();
        let cases: HealthTests = yaml(file);
        for case in cases.tests {
            let object: Value = yaml(&dir.join(&case.input_path));
            // Argo CD's test asks for the object's script (`GetHealthScript`): its group and
            // kind's own before a wildcard's (a case filed under `_.crossplane.io/_` may be a
            // kind with a script of its own).
            let group = object["apiVersion"].as_str().unwrap_or_default();
            let group = group.rsplit_once('/').map_or("", |(g, _)| g);
            let own = root.join(group).join(kind(&object)).join("health.lua");
            let script_path = if own.is_file() {
                own
            } else {
                dir.join("health.lua")
            };
            let script = std::fs::read_to_string(script_path).unwrap();
            // Argo CD's TestLuaHealthScript: UseOpenLibs, the whole HealthStatus compared.
            let got = lua.health(Libraries::Open, &script, &object);
            let want = case
                .health_status
                .as_ref()
                .map(|e| (e.status.clone(), e.message.clone()));
            let ok = matches!(&got, Ok(g) if *g == want);
            tally.check(ok, || {
                format!(
                    "{}/{}: {got:?}, want {want:?}",
                    dir.display(),
                    case.input_path
                )
            });
        }
    }
    report("health", &files, &tally);
}

/// An offered action as Argo CD's `ResourceAction` type holds it: its fields but those it omits
/// when empty (Go's zero values), and of each parameter only its name (the one field
/// `ResourceActionParam` has; an expected result's `default` is dropped on reading as in Argo
/// CD's own test).
fn without_zero_values(mut action: Value) -> Value {
    if let Some(params) = action.get_mut("params").and_then(Value::as_array_mut) {
        for p in params {
            *p = serde_json::json!({"name": p["name"]});
        }
    }
    if let Some(m) = action.as_object_mut() {
        m.retain(|_, v| {
            !(v.is_null()
                || *v == Value::Bool(false)
                || v.as_str() == Some("")
                || v.as_array().is_some_and(|a| a.is_empty()))
        });
    }
    action
}

#[test]
fn every_discovery_and_action_case_of_argo_cds_own_suite() {
    let mut files = Vec::new();
    files_named(&suite(), "action_test.yaml", &mut files);
    let mut lua = ArgoLua::start().unwrap();
    let (mut discovery, mut actions) = (Tally::default(), Tally::default());
    for file in &files {
        let dir = file.parent().unwrap();
        let cases: ActionTests = yaml(file);
        for case in cases.discovery_tests {
            let object: Value = yaml(&dir.join(&case.input_path));
            let script = std::fs::read_to_string(dir.join("discovery.lua")).unwrap();
            // Argo CD's TestLuaResourceActionsScript: UseOpenLibs; each action offered is
            // one of the expected.
            let expected: Vec<Value> = case.result.into_iter().map(without_zero_values).collect();
            let got = lua.discover_json(Libraries::Open, &script, &object);
            let ok = matches!(&got, Ok(offered) if offered
                .iter()
                .all(|a| expected.contains(&without_zero_values(a.clone()))));
            discovery.check(ok, || {
                format!(
                    "{}/{}: {got:?}, want {expected:?}",
                    dir.display(),
                    case.input_path
                )
            });
        }
        for case in cases.action_tests {
            let what = format!("{}/{} on {}", dir.display(), case.action, case.input_path);
            let result = run_action(&mut lua, dir, &case);
            actions.check(result.is_ok(), || {
                format!("{what}: {}", result.unwrap_err())
            });
        }
    }
    report("discovery", &files, &discovery);
    report("action", &files, &actions);
}

/// One action case, judged as Argo CD's test judges it; `Err` says how it missed.
fn run_action(lua: &mut ArgoLua, dir: &Path, case: &ActionCase) -> Result<(), String> {
    let script = std::fs::read_to_string(dir.join(&case.action).join("action.lua"))
        .map_err(|e| e.to_string())?;
    let source: Value = yaml(&dir.join(&case.input_path));
    let before = now();
    let result = lua.action(Libraries::Customization, &script, &source, &case.parameters);
    let window = (before, now() + 1);
    if !case.expected_error_message.is_empty() {
        return match result {
            Err(e) if e.to_string() == case.expected_error_message => Ok(()),
            other => Err(format!(
                "{other:?}, want the error {:?}",
                case.expected_error_message
            )),
        };
    }
    let impacted = result.map_err(|e| e.to_string())?;
    let expected = expected_objects(&dir.join(&case.expected_output_path));
    for one in impacted {
        let mut got = one.resource;
        // Objects an action creates from a CronJob, CronWorkflow or WorkflowTemplate get a
        // name made at run time: Argo CD's test finds them by the source's name as a prefix
        // and then compares them under the expected name.
        let derived = matches!(
            (kind(&got), kind(&source)),
            ("Job", "CronJob") | ("Workflow", "CronWorkflow" | "WorkflowTemplate")
        );
        let want = expected
            .iter()
            .find(|e| {
                e["apiVersion"] == got["apiVersion"]
                    && e["kind"] == got["kind"]
                    && e["metadata"]["namespace"] == got["metadata"]["namespace"]
                    && if derived {
                        name(e).starts_with(name(&source))
                    } else {
                        name(e) == name(&got)
                    }
            })
            .ok_or_else(|| format!("{} {} is in no expected output", kind(&got), name(&got)))?;
        if one.operation == "patch" && (kind(&got) != kind(&source) || name(&got) != name(&source))
        {
            return Err("a patch of another object than the source".into());
        }
        if derived {
            got["metadata"]["name"] = want["metadata"]["name"].clone();
        }
        // Argo CD's test leaves out what the API server sets on a Deployment (its status,
        // creation time and generation): its expected outputs were taken from live objects.
        let mut want = want.clone();
        if kind(&got) == "Deployment" {
            for side in [&mut want, &mut got] {
                if let Some(o) = side.as_object_mut() {
                    o.remove("status");
                }
                if let Some(m) = side["metadata"].as_object_mut() {
                    m.remove("creationTimestamp");
                    m.remove("generation");
                }
            }
        }
        // Argo CD's test diffs with gitops-engine's two-way diff: the fields the expected
        // object names must be as the action left them; the action's other fields are not
        // compared.
        if let Some(at) = first_difference(&want, &got, window, "") {
            return Err(format!("{} {} differs at {at}", kind(&got), name(&got)));
        }
    }
    Ok(())
}

fn kind(o: &Value) -> &str {
    o["kind"].as_str().unwrap_or_default()
}

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// An expected output: one object, or a list of `{unstructuredObj, k8sOperation}`.
fn expected_objects(path: &Path) -> Vec<Value> {
    match yaml::<Value>(path) {
        Value::Array(items) => items
            .into_iter()
            .map(|i| i["unstructuredObj"].clone())
            .collect(),
        one => vec![one],
    }
}

/// Where `got` departs from `want` in a field `want` names; `None` when nowhere.
fn first_difference(want: &Value, got: &Value, window: (i64, i64), at: &str) -> Option<String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => w.iter().find_map(|(k, wv)| {
            let here = format!("{at}.{k}");
            match g.get(k) {
                Some(gv) => first_difference(wv, gv, window, &here),
                None if wv.is_null() => None,
                None => Some(format!("{here}: missing, want {wv}")),
            }
        }),
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (wv, gv))| first_difference(wv, gv, window, &format!("{at}[{i}]"))),
        (Value::Number(w), Value::Number(g)) if w.as_f64() == g.as_f64() => None,
        (Value::String(w), Value::String(g)) if same_but_for_the_time(w, g, window) => None,
        _ if want == got => None,
        _ => Some(format!("{at}: {got}, want {want}")),
    }
}

/// Whether two texts are the same once every date and time in them is taken out, each time
/// the action wrote falling in `window` (the seconds the call ran): what an action writes as
/// "now" (a restart or reconcile request) cannot equal the time its test was written at.
/// Argo CD's test overwrites those fields on both sides; this checks the time is the run's.
fn same_but_for_the_time(want: &str, got: &str, window: (i64, i64)) -> bool {
    let stamp =
        regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?")
            .unwrap();
    if want == got {
        return true;
    }
    let in_window = stamp.find_iter(got).all(|m| {
        let text = m.as_str();
        let seconds = text
            .parse::<jiff::Timestamp>()
            .map(|t| t.as_second())
            .or_else(|_| {
                text.parse::<jiff::civil::DateTime>()
                    .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC))
                    .map(|z| z.timestamp().as_second())
            });
        seconds.is_ok_and(|s| (window.0..=window.1).contains(&s))
    });
    in_window
        && stamp.find(got).is_some()
        && stamp.replace_all(want, "<time>") == stamp.replace_all(got, "<time>")
}

fn report(what: &str, files: &[PathBuf], tally: &Tally) {
    println!(
        "Argo CD v{ARGOCD_VERSION} {what} cases: {} of {} pass ({} files)",
        tally.ran - tally.misses.len(),
        tally.ran,
        files.len()
    );
    assert!(
        tally.ran > 50,
        "too few {what} cases found: is the suite there?"
    );
    assert!(
        tally.misses.is_empty(),
        "{} of {} {what} cases missed:\n{}",
        tally.misses.len(),
        tally.ran,
        tally.misses.join("\n")
    );
}
