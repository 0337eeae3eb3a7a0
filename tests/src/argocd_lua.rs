//! Argo CD's own Lua runtime, to run `config/argocd/resource_customizations/` as Argo CD does.
//!
//! The scripts run in `argocd-lua` (`tools/argocd/lua`, built by `scripts/install-argocd`): a
//! small Go program around Argo CD's `util/lua` package of the pinned release, so gopher-lua,
//! Argo CD's library setup and safe `os`, its 1 s timeout, its JSON encoding of results and a
//! fresh Lua state per call are Argo CD's code, not an imitation. This module speaks its
//! line-per-request JSON protocol and turns an action's result into the merge patch
//! argocd-server sends.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The Argo CD release whose `util/lua` the harness is built from (`tools/argocd/go.mod`).
pub const ARGOCD_VERSION: &str = "3.6.2";

/// Why a script did not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The script failed; the text is Argo CD's own error, as argocd-server reports it.
    #[error("{0}")]
    Raised(String),
    /// The harness could not be asked (not built, crashed, answered nonsense).
    #[error("argocd-lua: {0}")]
    Harness(String),
}

/// Which libraries a script gets: the two ways Argo CD runs scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Libraries {
    /// As an `argocd-cm` customization (how tfops ships its scripts): `base`, `table`,
    /// `package` and a safe `os`, no `string` or `math`.
    Customization,
    /// With every gopher-lua library open: Argo CD's built-in scripts, and customizations
    /// under `resource.customizations.useOpenLibs.<group_kind>: "true"`.
    Open,
}

/// An action as discovery offers it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferedAction {
    /// The action's name.
    pub name: String,
    /// Whether Argo CD shows it greyed out.
    #[serde(default)]
    pub disabled: bool,
    /// Its icon.
    #[serde(default)]
    pub icon_class: String,
    /// Its label.
    #[serde(default)]
    pub display_name: String,
}

/// One resource an action touches, as Argo CD's `ImpactedResource`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Impacted {
    /// `patch` (the object itself) or `create` (a new object).
    pub operation: String,
    /// The object as the action wants it.
    pub resource: Value,
}

/// A running `argocd-lua`; each call is a fresh Lua state inside it, as in Argo CD.
pub struct ArgoLua {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// Where `argocd-lua` is: `$TFOPS_ARGOCD_LUA`, else the pinned build under `.tools/`.
pub fn binary() -> PathBuf {
    std::env::var_os("TFOPS_ARGOCD_LUA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.tools/argocd")
                .join(format!("v{ARGOCD_VERSION}"))
                .join("argocd-lua")
        })
}

impl ArgoLua {
    /// Starts the harness.
    ///
    /// # Errors
    /// The binary is missing (run `scripts/install-argocd`) or does not start.
    pub fn start() -> Result<Self, ScriptError> {
        let path = binary();
        let mut child = Command::new(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| {
                ScriptError::Harness(format!(
                    "{}: {e} (scripts/install-argocd builds it)",
                    path.display()
                ))
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ScriptError::Harness("no pipes to the harness".into()));
        };
        Ok(Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    fn ask(&mut self, request: &Value) -> Result<Value, ScriptError> {
        let broken = |e: std::io::Error| ScriptError::Harness(e.to_string());
        writeln!(self.stdin, "{request}").map_err(broken)?;
        self.stdin.flush().map_err(broken)?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line).map_err(broken)? == 0 {
            return Err(ScriptError::Harness("the harness ended".into()));
        }
        let answer: Value = serde_json::from_str(&line)
            .map_err(|e| ScriptError::Harness(format!("{e}: {line}")))?;
        match answer["error"].as_str() {
            Some(e) if e.starts_with("request: ") => Err(ScriptError::Harness(e.into())),
            Some(e) => Err(ScriptError::Raised(e.into())),
            None => Ok(answer),
        }
    }

    fn request(op: &str, libraries: Libraries, script: &str, object: &Value) -> Value {
        json!({
            "op": op,
            "script": script,
            "object": object,
            "openLibs": libraries == Libraries::Open,
        })
    }

    /// A health script's `(status, message)` for `object`; `None` when it returns nil.
    ///
    /// # Errors
    /// The script's error, as Argo CD words it.
    pub fn health(
        &mut self,
        libraries: Libraries,
        script: &str,
        object: &Value,
    ) -> Result<Option<(String, String)>, ScriptError> {
        let answer = self.ask(&Self::request("health", libraries, script, object))?;
        if answer["null"] == json!(true) {
            return Ok(None);
        }
        let hs = &answer["health"];
        Ok(Some((
            hs["status"].as_str().unwrap_or_default().to_string(),
            hs["message"].as_str().unwrap_or_default().to_string(),
        )))
    }

    /// The actions a discovery script offers for `object`, by name.
    ///
    /// # Errors
    /// The script's error, as Argo CD words it.
    pub fn discover(
        &mut self,
        libraries: Libraries,
        script: &str,
        object: &Value,
    ) -> Result<Vec<OfferedAction>, ScriptError> {
        let actions = self.discover_json(libraries, script, object)?;
        serde_json::from_value(Value::Array(actions))
            .map_err(|e| ScriptError::Harness(e.to_string()))
    }

    /// The actions a discovery script offers, whole (with their `params`), as Argo CD's API
    /// gives them.
    ///
    /// # Errors
    /// The script's error, as Argo CD words it.
    pub fn discover_json(
        &mut self,
        libraries: Libraries,
        script: &str,
        object: &Value,
    ) -> Result<Vec<Value>, ScriptError> {
        let answer = self.ask(&Self::request("discovery", libraries, script, object))?;
        match answer.get("actions") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a.clone()),
            Some(other) => Err(ScriptError::Harness(format!("not a list: {other}"))),
        }
    }

    /// What an action script does to `object`, with `params` as `actionParams`.
    ///
    /// # Errors
    /// The script's error, as Argo CD words it.
    pub fn action(
        &mut self,
        libraries: Libraries,
        script: &str,
        object: &Value,
        params: &BTreeMap<String, String>,
    ) -> Result<Vec<Impacted>, ScriptError> {
        let mut request = Self::request("action", libraries, script, object);
        request["params"] = json!(params);
        let answer = self.ask(&request)?;
        let resources = answer.get("resources").cloned().unwrap_or(json!([]));
        serde_json::from_value(resources).map_err(|e| ScriptError::Harness(e.to_string()))
    }

    /// The object a tfops action returns (tfops' actions only ever patch their object).
    ///
    /// # Errors
    /// The script's error; a result other than one patch of the object.
    pub fn patching_action(
        &mut self,
        libraries: Libraries,
        script: &str,
        object: &Value,
        params: &BTreeMap<String, String>,
    ) -> Result<Value, ScriptError> {
        let mut impacted = self.action(libraries, script, object, params)?;
        match (impacted.pop(), impacted.is_empty()) {
            (Some(one), true) if one.operation == "patch" => Ok(one.resource),
            (other, _) => Err(ScriptError::Harness(format!(
                "expected one patch of the object, got {other:?} and {} more",
                impacted.len()
            ))),
        }
    }
}

impl Drop for ArgoLua {
    fn drop(&mut self) {
        // Closing its input ends it; a kill is for a harness stuck in a script.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The JSON merge patch (RFC 7386) from `original` to `modified`, as argocd-server computes
/// it from an action's result.
pub fn merge_patch(original: &Value, modified: &Value) -> Value {
    match (original, modified) {
        (Value::Object(a), Value::Object(b)) => {
            let mut patch = Map::new();
            for (k, before) in a {
                match b.get(k) {
                    None => {
                        patch.insert(k.clone(), Value::Null);
                    }
                    Some(after) if after != before => {
                        patch.insert(k.clone(), merge_patch(before, after));
                    }
                    Some(_) => {}
                }
            }
            for (k, after) in b {
                if !a.contains_key(k) {
                    patch.insert(k.clone(), after.clone());
                }
            }
            Value::Object(patch)
        }
        (_, after) => after.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn merge_patches_remove_replace_and_add() {
        let a = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        let b = json!({"b": {"c": 2, "d": 4}, "e": [1, 2], "f": "x"});
        let patch = merge_patch(&a, &b);
        assert_eq!(
            patch,
            json!({"a": null, "b": {"d": 4}, "e": [1, 2], "f": "x"})
        );
        let mut applied = a.clone();
        json_patch::merge(&mut applied, &patch);
        assert_eq!(applied, b);
    }
}
