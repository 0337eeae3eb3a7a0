//! Whose pull requests are planned. A plan runs the pull request's Terraform (its data
//! sources, provider configuration, external programs) with the plan identity's credentials,
//! so only code someone trusted vouches for is planned: a trusted author's, or a head a
//! trusted user asked for by its whole commit id (`/tfops plan <sha>`, which a later push
//! does not carry over to: a prefix could be matched by a commit made to match it).

use std::collections::BTreeSet;

use super::PullRequest;

/// The command a trusted user comments to plan an untrusted head.
pub const PLAN_COMMAND: &str = "/tfops plan";

/// A comment on a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullComment {
    /// Who wrote it (a forge login).
    pub author: String,
    /// Its text.
    pub body: String,
}

/// Whether a pull request's head may be planned, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Its author is trusted.
    Author(String),
    /// A trusted user asked for this head (`/tfops plan <sha>`).
    AskedBy(String),
    /// Not planned; the text says why and how to plan it.
    Untrusted(String),
}

impl Trust {
    /// Whether the head may be planned.
    pub fn allows(&self) -> bool {
        !matches!(self, Self::Untrusted(_))
    }
}

/// Whom to trust: `trusted_authors` (`spec.sourceRef.pullRequests.trustedAuthors`) when it
/// lists anyone, else the `writers` (logins with write permission on the repository, as the
/// forge says). A fork's author is trusted only when listed. A head of anyone else is planned
/// once a trusted user other than its author comments `/tfops plan <sha>` naming its whole
/// commit id (a prefix would not do: an author can make a commit whose id starts with one).
pub fn trust(
    pull: &PullRequest,
    trusted_authors: &[String],
    writers: &BTreeSet<String>,
    comments: &[PullComment],
) -> Trust {
    let listed = |login: &str| trusted_authors.iter().any(|t| t == login);
    let trusted =
        |login: &str| listed(login) || (trusted_authors.is_empty() && writers.contains(login));
    let author = pull.author.as_str();
    if listed(author) || (!pull.from_fork && trusted(author)) {
        return Trust::Author(author.to_string());
    }
    let asked = comments
        .iter()
        .find(|c| c.author != author && trusted(&c.author) && names_head(&c.body, &pull.head_sha));
    if let Some(c) = asked {
        return Trust::AskedBy(c.author.clone());
    }
    let whose = if pull.from_fork {
        format!("{author} opened it from a fork and is not in trustedAuthors")
    } else if trusted_authors.is_empty() {
        format!("{author} has no write permission on the repository")
    } else {
        format!("{author} is not in trustedAuthors")
    };
    Trust::Untrusted(format!(
        "not planned: {whose}. A plan runs this code with the plan identity's credentials; \
         once you have read it, a trusted user can plan this head by commenting `{PLAN_COMMAND} {}`",
        pull.head_sha
    ))
}

/// Whether `body` holds a line `/tfops plan <sha>` naming `head` whole.
fn names_head(body: &str, head: &str) -> bool {
    body.lines().any(|line| {
        let mut words = line.split_whitespace();
        let command = (words.next(), words.next());
        let sha = words.next().unwrap_or_default();
        command == (Some("/tfops"), Some("plan"))
            && words.next().is_none()
            && !head.is_empty()
            && sha.eq_ignore_ascii_case(head)
    })
}
