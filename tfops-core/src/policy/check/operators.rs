//! The types of CEL's operators: what each accepts, what it gives.

use cel::common::ast::operators;

use super::{Problem, Ty, join, type_err};

/// The type of operator `name` applied to `args`; `None` when `name` is no operator.
pub(super) fn operator(name: &str, args: &[Ty]) -> Option<Result<Ty, Problem>> {
    let two = || (args.first().cloned(), args.get(1).cloned());
    Some(match name {
        operators::LOGICAL_AND | operators::LOGICAL_OR => {
            let op = if name == operators::LOGICAL_AND {
                "&&"
            } else {
                "||"
            };
            args.iter()
                .try_for_each(|a| bool_operand(a, op))
                .map(|()| Ty::Bool)
        }
        operators::LOGICAL_NOT => {
            bool_operand(args.first().unwrap_or(&Ty::Dyn), "!").map(|()| Ty::Bool)
        }
        operators::NOT_STRICTLY_FALSE => {
            bool_operand(args.first().unwrap_or(&Ty::Dyn), "the macro's predicate")
                .map(|()| Ty::Bool)
        }
        operators::CONDITIONAL => bool_operand(args.first().unwrap_or(&Ty::Dyn), "?:").map(|()| {
            join(
                args.get(1).cloned().unwrap_or(Ty::Dyn),
                args.get(2).cloned().unwrap_or(Ty::Dyn),
            )
        }),
        operators::EQUALS | operators::NOT_EQUALS => match two() {
            (Some(a), Some(b)) if !comparable(&a, &b) => type_err(format!(
                "comparing {a} with {b} is never equal (convert one side)"
            )),
            _ => Ok(Ty::Bool),
        },
        operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS => match two() {
            (Some(a), Some(b)) if !orderable(&a, &b) => {
                type_err(format!("cannot order {a} against {b}"))
            }
            _ => Ok(Ty::Bool),
        },
        operators::ADD => add(two()),
        operators::SUBSTRACT | operators::MULTIPLY | operators::DIVIDE | operators::MODULO => {
            arithmetic(name, two())
        }
        operators::NEGATE => match args.first() {
            Some(t @ (Ty::Int | Ty::Double | Ty::Dyn)) => Ok(t.clone()),
            Some(other) => type_err(format!("cannot negate {other}")),
            None => Ok(Ty::Dyn),
        },
        operators::INDEX => index(two()),
        operators::IN => match args.get(1) {
            Some(Ty::List(_) | Ty::Map(..) | Ty::Change | Ty::Dyn) | None => Ok(Ty::Bool),
            Some(other) => type_err(format!(
                "`in` needs a list or a map on its right, not {other}"
            )),
        },
        operators::OPT_INDEX | operators::OPT_SELECT => Ok(Ty::Dyn),
        _ => return None,
    })
}

fn bool_operand(t: &Ty, op: &str) -> Result<(), Problem> {
    match t {
        Ty::Bool | Ty::Dyn => Ok(()),
        other => type_err(format!("{op} needs bool operands, not {other}")),
    }
}

/// `a + b`: numbers, strings, bytes, durations of one kind; lists; a timestamp and a duration.
fn add(operands: (Option<Ty>, Option<Ty>)) -> Result<Ty, Problem> {
    match operands {
        (Some(Ty::Dyn), _) | (_, Some(Ty::Dyn)) => Ok(Ty::Dyn),
        (Some(Ty::List(a)), Some(Ty::List(b))) => Ok(Ty::List(Box::new(if *a == Ty::Dyn {
            *b
        } else if *b == Ty::Dyn {
            *a
        } else {
            join(*a, *b)
        }))),
        (Some(a), Some(b))
            if a == b
                && matches!(
                    a,
                    Ty::Int | Ty::Uint | Ty::Double | Ty::String | Ty::Bytes | Ty::Duration
                ) =>
        {
            Ok(a)
        }
        (Some(Ty::Timestamp), Some(Ty::Duration)) | (Some(Ty::Duration), Some(Ty::Timestamp)) => {
            Ok(Ty::Timestamp)
        }
        (Some(a), Some(b)) => type_err(format!(
            "cannot add {a} and {b}{}",
            if a == Ty::String || b == Ty::String {
                " (convert with string())"
            } else {
                ""
            }
        )),
        _ => Ok(Ty::Dyn),
    }
}

/// `-`, `*`, `/`, `%`: numbers of one kind; two timestamps subtract to a duration.
fn arithmetic(name: &str, operands: (Option<Ty>, Option<Ty>)) -> Result<Ty, Problem> {
    match operands {
        (Some(Ty::Dyn), _) | (_, Some(Ty::Dyn)) => Ok(Ty::Dyn),
        (Some(a), Some(b)) if a == b && is_numeric(&a) => Ok(a),
        (Some(Ty::Timestamp), Some(Ty::Timestamp)) if name == operators::SUBSTRACT => {
            Ok(Ty::Duration)
        }
        (Some(a), Some(b)) => type_err(format!("arithmetic on {a} and {b}")),
        _ => Ok(Ty::Dyn),
    }
}

/// `a[i]`: a list by an integer, a map by anything, a change by a field name.
fn index(operands: (Option<Ty>, Option<Ty>)) -> Result<Ty, Problem> {
    match operands {
        (Some(Ty::List(e)), Some(Ty::Int | Ty::Uint | Ty::Dyn)) => Ok(*e),
        (Some(Ty::List(_)), Some(i)) => type_err(format!("a list index must be an int, not {i}")),
        (Some(Ty::Map(_, v)), _) => Ok(*v),
        (Some(Ty::Change), Some(Ty::String | Ty::Dyn)) | (Some(Ty::Dyn), _) => Ok(Ty::Dyn),
        (Some(other), _) => type_err(format!("cannot index {other}")),
        _ => Ok(Ty::Dyn),
    }
}

fn is_numeric(t: &Ty) -> bool {
    matches!(t, Ty::Int | Ty::Uint | Ty::Double)
}

/// Whether `==` between the two can ever be true.
fn comparable(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (Ty::Dyn, _) | (_, Ty::Dyn) | (Ty::Null, _) | (_, Ty::Null) => true,
        (a, b) if is_numeric(a) && is_numeric(b) => true,
        (Ty::List(a), Ty::List(b)) => comparable(a, b),
        (Ty::Map(..), Ty::Map(..)) | (Ty::Change, Ty::Map(..)) | (Ty::Map(..), Ty::Change) => true,
        (a, b) => a == b,
    }
}

fn orderable(a: &Ty, b: &Ty) -> bool {
    match (a, b) {
        (Ty::Dyn, x) | (x, Ty::Dyn) => !matches!(
            x,
            Ty::List(_) | Ty::Map(..) | Ty::Change | Ty::Null | Ty::Bool
        ),
        (a, b) if is_numeric(a) && is_numeric(b) => true,
        (a, b) => a == b && matches!(a, Ty::String | Ty::Bytes | Ty::Duration | Ty::Timestamp),
    }
}
