//! Load-time type checking of policy expressions.
//!
//! The `cel` crate parses and evaluates but has no type checker, so a rule such as
//! `size(changes) > "3"` or `"changed " + size(changed)` would only fail on a real plan, and a
//! rule whose result is not a boolean would only be found then. This walks the parsed
//! expression with what is known of every name: the plan's lists hold changes with known
//! fields, policy variables have the type of their expression, loop variables the element
//! type of what they range over; what comes from the plan or the object (`change.after`,
//! `plan.x`, `object.x`) is `dyn`, checked when the plan is evaluated. A definite mistake is an
//! error naming the expression; anything that could hold on some plan passes.

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, LiteralValue, MapExpr};
use cel::parser::Expression;

mod operators;

/// A CEL type as far as the checker knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ty {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    Type,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    /// A resource change: `{address, type, name, mode, actions, before, after}`.
    Change,
    /// Not known before a plan is at hand.
    Dyn,
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ty::Bool => write!(f, "bool"),
            Ty::Int => write!(f, "int"),
            Ty::Uint => write!(f, "uint"),
            Ty::Double => write!(f, "double"),
            Ty::String => write!(f, "string"),
            Ty::Bytes => write!(f, "bytes"),
            Ty::Null => write!(f, "null"),
            Ty::Duration => write!(f, "duration"),
            Ty::Timestamp => write!(f, "timestamp"),
            Ty::Type => write!(f, "type"),
            Ty::List(e) => write!(f, "list({e})"),
            Ty::Map(k, v) => write!(f, "map({k}, {v})"),
            Ty::Change => write!(f, "change"),
            Ty::Dyn => write!(f, "dyn"),
        }
    }
}

/// What is wrong with an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Problem {
    /// It reads a name that is not defined.
    Unknown(String),
    /// It calls a function that does not exist.
    UnknownFunction(String),
    /// It cannot work on any plan.
    Type(String),
}

const CHANGE_FIELDS: &[&str] = &[
    "address", "type", "name", "mode", "actions", "before", "after",
];

/// The names every expression may read, with their types (`change` is bound for
/// `scope: Resource` rules only).
pub(super) fn built_ins() -> Vec<(String, Ty)> {
    super::context::BUILT_IN
        .iter()
        .filter(|name| **name != "change")
        .map(|name| {
            let ty = match *name {
                "plan" | "object" => Ty::Map(Box::new(Ty::String), Box::new(Ty::Dyn)),
                // `changes`, `changed`, `creates`, ...: lists of changes.
                _ => Ty::List(Box::new(Ty::Change)),
            };
            (name.to_string(), ty)
        })
        .collect()
}

/// Checks `e` with `names` in scope (innermost last); returns its type.
#[derive(Clone)]
pub(super) struct Checker<'f> {
    names: Vec<(String, Ty)>,
    /// Whether a function of that name exists (for names the checker has no rule for).
    pub function_exists: &'f dyn Fn(&str) -> bool,
}

/// The roots of namespaced functions (`math.greatest`) of the standard library and extensions.
const FUNCTION_NAMESPACES: &[&str] = &["math", "strings", "lists", "sets", "base64", "optional"];

/// `a.b.c` as `["a", "b", "c"]`, when `e` is only names.
fn qualified_name(e: &Expression) -> Option<Vec<String>> {
    match &e.expr {
        Expr::Ident(n) => Some(vec![n.clone()]),
        Expr::Select(s) if !s.test => {
            let mut v = qualified_name(&s.operand)?;
            v.push(s.field.clone());
            Some(v)
        }
        _ => None,
    }
}

pub(super) fn join(a: Ty, b: Ty) -> Ty {
    match (a, b) {
        (a, b) if a == b => a,
        (Ty::Null, x) | (x, Ty::Null) => x,
        (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(join(*a, *b))),
        _ => Ty::Dyn,
    }
}

/// The type of a list's items: their types joined (`dyn` for an empty list).
fn joined(items: impl Iterator<Item = Result<Ty, Problem>>) -> Result<Ty, Problem> {
    let mut elem: Option<Ty> = None;
    for t in items {
        let t = t?;
        elem = Some(match elem {
            None => t,
            Some(prev) => join(prev, t),
        });
    }
    Ok(elem.unwrap_or(Ty::Dyn))
}

pub(super) fn type_err<T>(message: String) -> Result<T, Problem> {
    Err(Problem::Type(message))
}

impl Checker<'_> {
    /// A checker over `names`.
    pub(super) fn new(
        names: Vec<(String, Ty)>,
        function_exists: &dyn Fn(&str) -> bool,
    ) -> Checker<'_> {
        Checker {
            names,
            function_exists,
        }
    }

    /// Binds `name` for the expressions checked after.
    pub(super) fn bind(&mut self, name: &str, ty: Ty) {
        self.names.push((name.to_string(), ty));
    }

    fn lookup(&self, name: &str) -> Result<Ty, Problem> {
        if let Some((_, t)) = self.names.iter().rev().find(|(n, _)| n == name) {
            return Ok(t.clone());
        }
        match name {
            "bool" | "int" | "uint" | "double" | "string" | "bytes" | "list" | "map"
            | "null_type" | "type" => Ok(Ty::Type),
            _ => Err(Problem::Unknown(name.to_string())),
        }
    }

    /// The type of `e`.
    pub(super) fn check(&mut self, e: &Expression) -> Result<Ty, Problem> {
        match &e.expr {
            Expr::Unspecified => Ok(Ty::Dyn),
            Expr::Literal(l) => Ok(match l {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            }),
            Expr::Ident(name) => self.lookup(name),
            Expr::Select(s) => {
                let operand = self.check(&s.operand)?;
                if s.test {
                    return match operand {
                        Ty::Map(..) | Ty::Change | Ty::Dyn => Ok(Ty::Bool),
                        other => type_err(format!("has() cannot test a field of {other}")),
                    };
                }
                self.select(&operand, &s.field)
            }
            Expr::List(l) => {
                let items = l.elements.iter().map(|item| self.check(item));
                Ok(Ty::List(Box::new(joined(items)?)))
            }
            Expr::Map(m) => self.map(m),
            Expr::Struct(_) => Ok(Ty::Dyn),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::Call(call) => self.check_call(call),
        }
    }

    /// A comprehension: its variables bound to what the range holds, the accumulator to what
    /// the steps make of it.
    fn comprehension(&mut self, c: &ComprehensionExpr) -> Result<Ty, Problem> {
        let range = self.check(&c.iter_range)?;
        let (first, second) = match &range {
            Ty::List(e) => (Ty::Int, (**e).clone()),
            Ty::Map(k, v) => ((**k).clone(), (**v).clone()),
            Ty::Dyn => (Ty::Dyn, Ty::Dyn),
            other => return type_err(format!("cannot iterate over {other}")),
        };
        let init = self.check(&c.accu_init)?;
        let depth = self.names.len();
        match &c.iter_var2 {
            // Two variables: index (or key) and element (or value).
            Some(v2) => {
                self.bind(&c.iter_var, first);
                self.bind(v2, second);
            }
            // One: the element of a list, the key of a map.
            None => {
                let one = if matches!(range, Ty::List(_)) {
                    second
                } else {
                    first
                };
                self.bind(&c.iter_var, one);
            }
        }
        self.bind(&c.accu_var, init.clone());
        let result = (|| {
            self.check(&c.loop_cond)?;
            let step = self.check(&c.loop_step)?;
            // `map` and `filter` start from `[]`: the steps say what the list holds.
            let accu = match (&init, step) {
                (Ty::List(e), step @ Ty::List(_)) if **e == Ty::Dyn => step,
                (_, step) => join(init.clone(), step),
            };
            self.bind(&c.accu_var, accu);
            self.check(&c.result)
        })();
        self.names.truncate(depth);
        result
    }

    /// A function call; `math.greatest(..)` is a namespaced function, not a method of a
    /// variable `math`.
    fn check_call(&mut self, call: &CallExpr) -> Result<Ty, Problem> {
        // `math.greatest(..)`: a namespaced function, not a method of a variable `math`.
        if let Some(t) = call.target.as_deref()
            && let Some(segments) = qualified_name(t)
            && FUNCTION_NAMESPACES.contains(&segments[0].as_str())
            && self.lookup(&segments[0]).is_err()
        {
            let name = format!("{}.{}", segments.join("."), call.func_name);
            if !(self.function_exists)(&name) {
                return Err(Problem::UnknownFunction(name));
            }
            let args = call
                .args
                .iter()
                .map(|a| self.check(a))
                .collect::<Result<Vec<_>, _>>()?;
            return self.call(&name, None, args);
        }
        let target = call.target.as_deref().map(|t| self.check(t)).transpose()?;
        let args = call
            .args
            .iter()
            .map(|a| self.check(a))
            .collect::<Result<Vec<_>, _>>()?;
        self.call(&call.func_name, target, args)
    }

    /// A map literal: its key and value types joined over the entries.
    fn map(&mut self, m: &MapExpr) -> Result<Ty, Problem> {
        let (mut key, mut value): (Option<Ty>, Option<Ty>) = (None, None);
        for entry in &m.entries {
            if let EntryExpr::MapEntry(me) = &entry.expr {
                let (k, v) = (self.check(&me.key)?, self.check(&me.value)?);
                key = Some(key.map_or(k.clone(), |p| join(p, k)));
                value = Some(value.map_or(v.clone(), |p| join(p, v)));
            }
        }
        Ok(Ty::Map(
            Box::new(key.unwrap_or(Ty::Dyn)),
            Box::new(value.unwrap_or(Ty::Dyn)),
        ))
    }

    fn select(&self, operand: &Ty, field: &str) -> Result<Ty, Problem> {
        match operand {
            Ty::Change => match field {
                "address" | "type" | "name" | "mode" => Ok(Ty::String),
                "actions" => Ok(Ty::List(Box::new(Ty::String))),
                "before" | "after" => Ok(Ty::Dyn),
                _ => type_err(format!(
                    "a change has no field {field:?} (it has {})",
                    CHANGE_FIELDS.join(", ")
                )),
            },
            Ty::Map(_, v) => Ok((**v).clone()),
            Ty::Dyn => Ok(Ty::Dyn),
            other => type_err(format!("cannot read field {field:?} of {other}")),
        }
    }

    fn call(&self, name: &str, target: Option<Ty>, args: Vec<Ty>) -> Result<Ty, Problem> {
        if let Some(ty) = operators::operator(name, &args) {
            return ty;
        }
        // The receiver of a function that may be called as a method or with it first.
        let (recv, rest): (Option<Ty>, &[Ty]) = match target {
            Some(t) => (Some(t), &args[..]),
            None => match args.split_first() {
                Some((first, rest)) => (Some(first.clone()), rest),
                None => (None, &args[..]),
            },
        };
        match name {
            "size" => match recv {
                Some(Ty::String | Ty::Bytes | Ty::List(_) | Ty::Map(..) | Ty::Change | Ty::Dyn) => {
                    Ok(Ty::Int)
                }
                Some(other) => type_err(format!("size() of {other}")),
                None => Ok(Ty::Int),
            },
            "contains" | "startsWith" | "endsWith" | "matches" => {
                self.string_method(name, recv, rest)?;
                Ok(Ty::Bool)
            }
            "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "charAt"
            | "format" | "quote" | "reverse"
                if matches!(recv, Some(Ty::String)) =>
            {
                Ok(Ty::String)
            }
            "split" => {
                self.string_method(name, recv, rest)?;
                Ok(Ty::List(Box::new(Ty::String)))
            }
            "indexOf" | "lastIndexOf" if matches!(recv, Some(Ty::String)) => Ok(Ty::Int),
            "join" => match recv {
                Some(Ty::List(_) | Ty::Dyn) | None => Ok(Ty::String),
                Some(other) => type_err(format!("join() needs a list, not {other}")),
            },
            "string" => Ok(Ty::String),
            "int" => Ok(Ty::Int),
            "uint" => Ok(Ty::Uint),
            "double" => Ok(Ty::Double),
            "bool" => Ok(Ty::Bool),
            "bytes" => Ok(Ty::Bytes),
            "dyn" => Ok(Ty::Dyn),
            "type" => Ok(Ty::Type),
            "duration" => Ok(Ty::Duration),
            "timestamp" => Ok(Ty::Timestamp),
            "ofType" => match (recv, rest.first()) {
                (Some(Ty::List(_) | Ty::Dyn), Some(Ty::String | Ty::Dyn)) => {
                    Ok(Ty::List(Box::new(Ty::Change)))
                }
                (r, a) => type_err(format!(
                    "ofType() is list.ofType(string), not called on {} with {}",
                    r.map_or("nothing".into(), |t| t.to_string()),
                    a.map_or("nothing".into(), |t| t.to_string())
                )),
            },
            "isDelete" | "isCreate" | "isUpdate" | "isReplace" => match recv {
                Some(Ty::Change | Ty::Map(..) | Ty::Dyn) => Ok(Ty::Bool),
                other => type_err(format!(
                    "{name}() is called on a change, not on {}",
                    other.map_or("nothing".into(), |t| t.to_string())
                )),
            },
            _ if (self.function_exists)(name) => Ok(Ty::Dyn),
            _ => Err(Problem::UnknownFunction(name.to_string())),
        }
    }

    fn string_method(&self, name: &str, recv: Option<Ty>, rest: &[Ty]) -> Result<(), Problem> {
        match recv {
            Some(Ty::String | Ty::Dyn) | None => {}
            Some(other) => {
                return type_err(format!("{name}() is a string function, not one of {other}"));
            }
        }
        match rest.first() {
            Some(Ty::String | Ty::Dyn) | None => Ok(()),
            Some(other) => type_err(format!("{name}() takes a string, not {other}")),
        }
    }
}
