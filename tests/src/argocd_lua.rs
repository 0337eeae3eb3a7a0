//! Argo CD's Lua runtime, as far as resource health and action scripts meet it, to run
//! `config/argocd/resource_customizations/` the way argocd-server would.
//!
//! What Argo CD does and this reproduces: gopher-lua is Lua 5.1 plus `goto` (LuaJIT here, with
//! the JIT off so that the instruction hook sees every instruction); scripts get only the
//! `base`, `table` and `package` libraries and a safe `os` (`time`, `date`, `clock`,
//! `difftime`), so `string.*` and `math.*` are absent; the object arrives with every number a
//! float; a returned empty table is encoded as `[]` unless the object had a map there, which is
//! restored (argocd's `cleanReturnedObj`); a script is stopped when it runs too long (Argo CD
//! allows 1 s; here a fixed instruction budget, so a test never depends on the machine's
//! speed). An action's result is turned into a JSON merge patch against the object, which is
//! what argocd-server sends to the API server.
//!
//! One difference is deliberate: `os.time()` and `os.date()` read a clock the caller fixes,
//! so that the expected outputs of `action_test.yaml` can name the time an action wrote.

use std::collections::BTreeMap;

use mlua::{HookTriggers, Lua, LuaOptions, LuaSerdeExt, StdLib, VmState};
use serde_json::{Map, Value};

/// Instructions a script may run (Argo CD gives 1 s of wall-clock time; tfops' scripts need
/// a few thousand).
pub const INSTRUCTION_BUDGET: u64 = 10_000_000;

/// Why a script did not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The script raised an error (its message as Argo CD shows it).
    #[error("{0}")]
    Raised(String),
    /// The script's answer is not what Argo CD expects.
    #[error("unexpected result: {0}")]
    Shape(String),
}

impl From<mlua::Error> for ScriptError {
    fn from(e: mlua::Error) -> Self {
        let text = match &e {
            mlua::Error::CallbackError { cause, .. } => cause.to_string(),
            other => other.to_string(),
        };
        // LuaJIT prefixes "runtime error: "; Argo CD shows the message itself.
        ScriptError::Raised(text.trim_start_matches("runtime error: ").to_string())
    }
}

/// An action as discovery offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferedAction {
    /// The action's name.
    pub name: String,
    /// Whether Argo CD shows it greyed out.
    pub disabled: bool,
    /// Its icon.
    pub icon_class: String,
    /// Its label.
    pub display_name: String,
}

/// A Lua state set up as Argo CD's, with its clock at `now` (Unix seconds).
pub fn runtime(now: i64) -> Result<Lua, ScriptError> {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::PACKAGE | StdLib::OS | StdLib::JIT,
        LuaOptions::default(),
    )?;
    lua.load(
        r#"
        jit.off()
        local real_date, real_time, clock, difftime = os.date, os.time, os.clock, os.difftime
        local now = ...
        local safe = {
          date = function(format, t) return real_date(format, t or now) end,
          time = function(t) if t == nil then return now end return real_time(t) end,
          clock = clock,
          difftime = difftime,
        }
        os = safe
        package.loaded.os = safe
        package.loaded.jit = nil
        jit = nil
        package.path = ""
        package.cpath = ""
        package.loadlib = nil
        "#,
    )
    .call::<()>(now)?;
    lua.set_hook(
        HookTriggers::new().every_nth_instruction(1000),
        |lua, _debug| {
            let used: u64 = lua.named_registry_value("tfops_instructions").unwrap_or(0) + 1000;
            lua.set_named_registry_value("tfops_instructions", used)?;
            if used > INSTRUCTION_BUDGET {
                return Err(mlua::Error::RuntimeError(
                    "the script ran too long (Argo CD stops scripts after 1 s)".into(),
                ));
            }
            Ok(VmState::Continue)
        },
    )?;
    Ok(lua)
}

/// Every number a float, as gopher-lua sees the object.
fn as_floats(v: &Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(a) => Value::Array(a.iter().map(as_floats).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), as_floats(v))).collect())
        }
        other => other.clone(),
    }
}

/// The value Go's JSON encoder writes for a Lua result: integral floats as integers, empty
/// tables as `[]`, except where `original` had a map (restored, as argocd does).
fn decoded(v: Value, original: Option<&Value>) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
            _ => Value::Number(n),
        },
        Value::Array(a) if a.is_empty() => match original {
            Some(Value::Object(_)) => Value::Object(Map::new()),
            _ => Value::Array(a),
        },
        Value::Object(o) if o.is_empty() => match original {
            Some(Value::Object(_)) => Value::Object(Map::new()),
            _ => Value::Array(Vec::new()),
        },
        Value::Array(a) => {
            let before = original.and_then(Value::as_array);
            Value::Array(
                a.into_iter()
                    .enumerate()
                    .map(|(i, v)| decoded(v, before.and_then(|b| b.get(i))))
                    .collect(),
            )
        }
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| {
                    let before = original.and_then(|b| b.get(&k));
                    (k, decoded(v, before))
                })
                .collect(),
        ),
        other => other,
    }
}

/// Runs `script` with the global `obj` set to `object`; what it returns, decoded.
fn run(lua: &Lua, script: &str, object: &Value) -> Result<Value, ScriptError> {
    lua.set_named_registry_value("tfops_instructions", 0u64)?;
    lua.globals()
        .set("obj", lua.to_value(&as_floats(object))?)?;
    let result: mlua::Value = lua.load(script).eval()?;
    let json: Value = lua.from_value(result)?;
    Ok(decoded(json, Some(object)))
}

/// A health script's `(status, message)` for `object`.
///
/// # Errors
/// The script's error; a result without a status.
pub fn health(lua: &Lua, script: &str, object: &Value) -> Result<(String, String), ScriptError> {
    let hs = run(lua, script, object)?;
    let status = hs["status"]
        .as_str()
        .ok_or_else(|| ScriptError::Shape(format!("no status in {hs}")))?;
    Ok((
        status.to_string(),
        hs["message"].as_str().unwrap_or_default().to_string(),
    ))
}

/// The actions a discovery script offers for `object`, by name.
///
/// # Errors
/// The script's error; a result that is not a table of actions.
pub fn discover(
    lua: &Lua,
    script: &str,
    object: &Value,
) -> Result<Vec<OfferedAction>, ScriptError> {
    let offered = run(lua, script, object)?;
    let table = offered
        .as_object()
        .ok_or_else(|| ScriptError::Shape(format!("not a table of actions: {offered}")))?;
    let by_name: BTreeMap<&String, &Value> = table.iter().collect();
    Ok(by_name
        .into_iter()
        .map(|(name, a)| OfferedAction {
            name: name.clone(),
            disabled: a["disabled"].as_bool().unwrap_or(false),
            icon_class: a["iconClass"].as_str().unwrap_or_default().to_string(),
            display_name: a["displayName"].as_str().unwrap_or_default().to_string(),
        })
        .collect())
}

/// What an action script returns for `object`: the object as it wants it.
///
/// # Errors
/// The script's error; a result that is not an object.
pub fn action(lua: &Lua, script: &str, object: &Value) -> Result<Value, ScriptError> {
    let changed = run(lua, script, object)?;
    if !changed.is_object() {
        return Err(ScriptError::Shape(format!("not an object: {changed}")));
    }
    Ok(changed)
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
    use serde_json::json;

    #[test]
    fn only_argo_cds_libraries_are_there_and_the_clock_is_fixed() {
        let lua = runtime(1_764_590_400).unwrap();
        let probe = |script: &str| run(&lua, script, &json!({})).unwrap();
        assert_eq!(
            probe("return string == nil and math == nil and io == nil"),
            json!(true)
        );
        assert_eq!(probe("return require('os').time()"), json!(1_764_590_400));
        assert_eq!(
            probe("return os.date('!%Y-%m-%dT%H:%M:%SZ')"),
            json!("2025-12-01T12:00:00Z")
        );
        assert_eq!(
            probe("return os.execute == nil and os.exit == nil"),
            json!(true)
        );
        // goto, as gopher-lua has it.
        assert_eq!(
            probe("local i = 0 ::again:: i = i + 1 if i < 3 then goto again end return i"),
            json!(3)
        );
        // ("x"):upper() needs the string library's metatable: absent too.
        assert!(run(&lua, "return ('x'):upper()", &json!({})).is_err());
    }

    #[test]
    fn numbers_are_floats_inside_and_empty_tables_come_back_as_argo_cd_encodes_them() {
        let lua = runtime(0).unwrap();
        let object = json!({"metadata": {"generation": 2, "labels": {}}, "spec": {"list": [1]}});
        assert_eq!(
            run(
                &lua,
                "return math_type == nil and obj.metadata.generation / 4",
                &object
            )
            .unwrap(),
            json!(0.5)
        );
        let back = run(
            &lua,
            "obj.metadata.fresh = {} obj.spec.list = {} return obj",
            &object,
        )
        .unwrap();
        assert_eq!(back["metadata"]["generation"], json!(2));
        assert_eq!(
            back["metadata"]["labels"],
            json!({}),
            "a map before: a map again"
        );
        assert_eq!(back["metadata"]["fresh"], json!([]), "new and empty: []");
        assert_eq!(back["spec"]["list"], json!([]));
    }

    #[test]
    fn a_script_that_runs_too_long_is_stopped() {
        let lua = runtime(0).unwrap();
        let e = run(&lua, "while true do end", &json!({})).unwrap_err();
        assert!(e.to_string().contains("ran too long"), "{e}");
        // The budget is per run.
        assert_eq!(run(&lua, "return 1", &json!({})).unwrap(), json!(1));
    }

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
