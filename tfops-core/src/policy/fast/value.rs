//! Values of the fast evaluator: borrowed strings and JSON, change views.

use std::rc::Rc;

use cel::Value as CelValue;

/// A string: borrowed from the plan, or shared (literals, results) so copies are cheap.
#[derive(Debug, Clone)]
pub(in crate::policy) enum Text<'a> {
    Borrowed(&'a str),
    Shared(Rc<str>),
}

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Text::Borrowed(s) => s,
            Text::Shared(s) => s,
        }
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl From<String> for Text<'_> {
    fn from(s: String) -> Self {
        Text::Shared(Rc::from(s))
    }
}

/// A value during fast evaluation, borrowing from the plan where it can.
#[derive(Debug, Clone)]
pub(in crate::policy) enum V<'j> {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Text<'j>),
    /// A JSON array or object of the plan or the object's spec.
    Json(&'j serde_json::Value),
    List(Rc<Vec<V<'j>>>),
    /// A resource change of the plan, seen as `{address, type, name, mode, actions, before,
    /// after}`.
    Change(&'j ChangeView<'j>),
    /// A list of resource changes.
    Changes(Rc<Vec<&'j ChangeView<'j>>>),
}

pub(super) const CREATE: u8 = 1;
pub(super) const DELETE: u8 = 2;
pub(super) const UPDATE: u8 = 4;
pub(super) const NO_OP: u8 = 8;
pub(super) const READ: u8 = 16;

/// A resource change entry of the plan with its fields looked up once.
#[derive(Debug)]
pub(in crate::policy) struct ChangeView<'j> {
    pub(super) address: &'j str,
    pub(super) ty: &'j str,
    pub(super) name: &'j str,
    pub(super) mode: &'j str,
    pub(super) actions: &'j serde_json::Value,
    pub(super) before: &'j serde_json::Value,
    pub(super) after: &'j serde_json::Value,
    pub(super) flags: u8,
}

impl<'j> ChangeView<'j> {
    /// The change as the interpreter sees it (for comparing the two evaluators).
    #[cfg(test)]
    pub(in crate::policy) fn as_json(&self) -> serde_json::Value {
        serde_json::json!({
            "address": self.address, "type": self.ty, "name": self.name, "mode": self.mode,
            "actions": self.actions, "before": self.before, "after": self.after,
        })
    }

    /// The view of `rc`, an entry of the plan's `resource_changes`.
    pub(in crate::policy) fn new(rc: &'j serde_json::Value) -> Self {
        static NULL: serde_json::Value = serde_json::Value::Null;
        let mut view = ChangeView {
            address: "",
            ty: "",
            name: "",
            mode: "",
            actions: &NULL,
            before: &NULL,
            after: &NULL,
            flags: 0,
        };
        // One pass over each object: looking each field up costs a search per field.
        let text = |v: &'j serde_json::Value| v.as_str().unwrap_or_default();
        for (key, value) in rc.as_object().into_iter().flatten() {
            match key.as_str() {
                "address" => view.address = text(value),
                "type" => view.ty = text(value),
                "name" => view.name = text(value),
                "mode" => view.mode = text(value),
                "change" => {
                    for (key, value) in value.as_object().into_iter().flatten() {
                        match key.as_str() {
                            "actions" => view.actions = value,
                            "before" => view.before = value,
                            "after" => view.after = value,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        for a in view.actions.as_array().into_iter().flatten() {
            view.flags |= match a.as_str() {
                Some("create") => CREATE,
                Some("delete") => DELETE,
                Some("update") => UPDATE,
                Some("no-op") => NO_OP,
                Some("read") => READ,
                _ => 0,
            };
        }
        view
    }
}

pub(super) fn from_json(v: &serde_json::Value) -> V<'_> {
    match v {
        serde_json::Value::Null => V::Null,
        serde_json::Value::Bool(b) => V::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => V::Int(i),
            (None, Some(u)) => V::Uint(u),
            _ => V::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => V::Str(Text::Borrowed(s)),
        other => V::Json(other),
    }
}

/// A value the interpreter computed (a policy variable), when this evaluator can hold it.
pub(in crate::policy) fn from_cel(v: &CelValue) -> Option<V<'static>> {
    Some(match v {
        CelValue::Null => V::Null,
        CelValue::Bool(b) => V::Bool(*b),
        CelValue::Int(i) => V::Int(*i),
        CelValue::UInt(u) => V::Uint(*u),
        CelValue::Float(f) => V::Double(*f),
        CelValue::String(s) => V::Str(Text::from(s.to_string())),
        CelValue::List(items) => V::List(Rc::new(
            items.iter().map(from_cel).collect::<Option<Vec<_>>>()?,
        )),
        _ => return None,
    })
}

/// A change's fields, in the order the evaluator numbers them.
pub(super) const CHANGE_FIELDS: [&str; 7] = [
    "address", "type", "name", "mode", "actions", "before", "after",
];
