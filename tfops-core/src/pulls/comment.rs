//! The one comment tfops keeps on a pull request, edited in place: found again by a hidden
//! marker, a summary line per object first, then each plan folded, within a size budget.

use super::statuses::{cut, one_line};
use super::{ObjectPlan, Outcome};
use crate::api::ObjectKey;

/// The hidden first line that marks tfops' own comment (never a new comment per push).
pub const MARKER: &str = "<!-- tfops:pull-request-plans -->";

/// GitHub refuses comments over 65,536 characters (Gitea has no limit): ours stay under, with
/// room for the forge's own escaping.
pub const COMMENT_BUDGET: usize = 60_000;

/// Longest message of a failed plan in its summary line.
const FAILURE_MAX: usize = 300;

/// The comment for `plans` made at `head_sha` (the pull request's head), within `budget`
/// characters: every summary line is kept; when the plans' text does not fit, the longest are
/// left out first, each replaced by `hint(key)` (where the whole plan can be read).
pub fn comment(
    head_sha: &str,
    plans: &[ObjectPlan],
    budget: usize,
    hint: impl Fn(&ObjectKey) -> String,
) -> String {
    let short: String = head_sha.chars().take(12).collect();
    let mut head = format!("{MARKER}\n### tfops: plans of this pull request\n\n");
    if plans.is_empty() {
        head.push_str(&format!(
            "At `{short}` (the pull request's head) this pull request changes no file of a \
             Terraform object that plans pull requests: nothing to plan.\n"
        ));
        return head;
    }
    head.push_str(&format!(
        "Planned at `{short}`, the pull request's head (not merged with its base), for the {} \
         object{} whose files it changes. Nothing is applied from a pull request.\n\n",
        plans.len(),
        if plans.len() == 1 { "" } else { "s" }
    ));
    for plan in plans {
        head.push_str(&summary_line(plan));
        head.push('\n');
    }
    let texts: Vec<(usize, &str)> = plans
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match &p.outcome {
            Outcome::Planned { text, .. } if !text.is_empty() => Some((i, text.as_str())),
            _ => None,
        })
        .collect();
    // Shortest first, as long as they fit: the longest are the ones left out.
    let mut by_length = texts.clone();
    by_length.sort_by_key(|(i, t)| (t.len(), *i));
    let mut room = budget.saturating_sub(head.len());
    let mut shown = vec![false; plans.len()];
    let pointers: usize = texts
        .iter()
        .map(|(i, _)| folded(&plans[*i].key, None, &hint).len() + 1)
        .sum();
    room = room.saturating_sub(pointers);
    for (i, text) in &by_length {
        let whole = folded(&plans[*i].key, Some(text), &hint).len();
        let pointer = folded(&plans[*i].key, None, &hint).len();
        // Showing a plan costs what it takes beyond its pointer (a short one costs nothing).
        if whole <= pointer {
            room += pointer - whole;
            shown[*i] = true;
        } else if whole - pointer <= room {
            room -= whole - pointer;
            shown[*i] = true;
        }
    }
    let mut out = head;
    for (i, text) in texts {
        // (The `+ 1` of each pointer above.)
        out.push('\n');
        out.push_str(&folded(&plans[i].key, shown[i].then_some(text), &hint));
    }
    out
}

/// The comment once the pull request closed.
pub fn closed(merged: bool) -> String {
    let how = if merged { "merged" } else { "closed" };
    format!(
        "{MARKER}\n### tfops: plans of this pull request\n\nThe pull request was {how}: its plans \
         were removed. After a merge, each object plans its branch again under its own approval.\n"
    )
}

/// At most this many addresses or findings of one object in its summary line.
const LIST_MAX: usize = 10;

/// Text from the pull request or its plan (a failure's message, resource addresses, policy
/// findings naming them) in a code span it cannot close: on one line, at most `max`
/// characters, and fenced by more backticks than it holds in a row, so that no Markdown or
/// HTML of its own (a hidden `<!--`, a link, a fake line) reaches the comment.
fn code(text: &str, max: usize) -> String {
    let text = cut(&one_line(text), max);
    let fence = "`".repeat(longest_backticks(&text) + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// `items` as code spans, at most [`LIST_MAX`], then how many more.
fn list(items: &[String]) -> String {
    let mut shown: Vec<String> = items.iter().take(LIST_MAX).map(|i| code(i, 200)).collect();
    if items.len() > LIST_MAX {
        shown.push(format!("and {} more", items.len() - LIST_MAX));
    }
    shown.join(", ")
}

fn summary_line(plan: &ObjectPlan) -> String {
    let who = format!(
        "**{}/{}** ({})",
        plan.key.namespace,
        plan.key.name,
        code(path(&plan.path), 200)
    );
    match &plan.outcome {
        Outcome::Planning => format!("- ⏳ {who}: planning…"),
        Outcome::NotPlanned { why } => format!("- ⏸️ {who}: {}", code(why, FAILURE_MAX)),
        Outcome::Failed { reason, message } => {
            let reason = code(reason, 100);
            format!(
                "- ❌ {who}: plan failed ({reason}): {}",
                code(message, FAILURE_MAX)
            )
        }
        Outcome::Planned {
            summary,
            replaced,
            warnings,
            denials,
            ..
        } => {
            let mut line = if denials.is_empty() {
                format!("- ✅ {who}: `{summary}`")
            } else {
                format!(
                    "- ❌ {who}: `{summary}`, **denied by policy**: {}",
                    list(denials)
                )
            };
            if !replaced.is_empty() {
                line.push_str(&format!(", **replaces** {}", list(replaced)));
            }
            if !warnings.is_empty() {
                line.push_str(&format!(", policy warnings: {}", list(warnings)));
            }
            line
        }
    }
}

/// A plan folded under its object's name; `None`: left out, pointing to where it is.
fn folded(key: &ObjectKey, text: Option<&str>, hint: &impl Fn(&ObjectKey) -> String) -> String {
    let name = format!("{}/{}", key.namespace, key.name);
    match text {
        Some(text) => {
            let fence = fence_for(text);
            format!(
                "<details><summary>Plan of {name}</summary>\n\n{fence}text\n{}\n{fence}\n\n</details>\n",
                text.trim_end()
            )
        }
        None => format!(
            "<details><summary>Plan of {name} (left out: too long for this comment)</summary>\n\n{}\n\n</details>\n",
            hint(key)
        ),
    }
}

/// A code fence longer than any run of backticks in `text`, so the plan cannot close it.
fn fence_for(text: &str) -> String {
    "`".repeat(longest_backticks(text).max(2) + 1)
}

/// The longest run of backticks in `text`.
fn longest_backticks(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

fn path(p: &str) -> &str {
    if crate::source::watch::is_root(p) {
        "."
    } else {
        p
    }
}
