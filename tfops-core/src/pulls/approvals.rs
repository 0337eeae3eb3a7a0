//! Which reviews of a pull request approve an object's plan of it. A review counts when its
//! reviewer is one of the object's approvers and not the author, it approves, it was given on
//! the head that was planned, and the forge says it is neither stale nor dismissed. A
//! reviewer's latest review decides: a later request for changes (or a dismissed approval)
//! takes back an earlier approval.

pub use crate::ports::PullApproval;

/// What a review says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewState {
    /// Approves.
    Approved,
    /// Asks for changes.
    RequestChanges,
    /// Only comments (or is not submitted yet, or anything else): decides nothing.
    Other,
}

/// A review of a pull request, as the forge lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Review {
    /// Who gave it (a forge login).
    pub reviewer: String,
    /// What it says.
    pub state: ReviewState,
    /// The commit it was given on.
    pub commit: String,
    /// The forge marks it stale: commits were pushed after it.
    pub stale: bool,
    /// Someone dismissed it.
    pub dismissed: bool,
}

/// The reviewers whose approval of `planned_head` counts, in the order of `reviews` (the
/// forge's, oldest first): see the module's rules. `author`: who opened the pull request;
/// `is_approver`: whether a login is one of the object's approvers.
pub fn approving(
    reviews: &[Review],
    author: &str,
    planned_head: &str,
    is_approver: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, review) in reviews.iter().enumerate() {
        let latest = !reviews[i + 1..]
            .iter()
            .any(|later| later.reviewer == review.reviewer && later.state != ReviewState::Other);
        let counts = latest
            && review.state == ReviewState::Approved
            && !review.stale
            && !review.dismissed
            && !planned_head.is_empty()
            && review.commit == planned_head
            && review.reviewer != author
            && is_approver(&review.reviewer);
        if counts && !out.contains(&review.reviewer) {
            out.push(review.reviewer.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(who: &str, state: ReviewState, commit: &str) -> Review {
        Review {
            reviewer: who.into(),
            state,
            commit: commit.into(),
            stale: false,
            dismissed: false,
        }
    }

    fn approvers(login: &str) -> bool {
        matches!(login, "alice" | "bob" | "carol")
    }

    #[test]
    fn only_an_approvers_fresh_approval_of_the_planned_head_counts() {
        use ReviewState::*;
        let mut stale = review("bob", Approved, "h2");
        stale.stale = true;
        let mut dismissed = review("carol", Approved, "h2");
        dismissed.dismissed = true;
        let reviews = vec![
            review("alice", Approved, "h1"),
            review("mallory", Approved, "h2"),
            review("dave", Approved, "h2"),
            stale,
            dismissed,
            review("alice", Other, "h2"),
        ];
        // dave is the author; alice approved an older head; bob's is stale; carol's dismissed.
        assert!(approving(&reviews, "dave", "h2", approvers).is_empty());
        let fresh = [
            review("bob", Approved, "h2"),
            review("alice", Approved, "h2"),
        ];
        assert_eq!(approving(&fresh, "dave", "h2", approvers), ["bob", "alice"]);
        assert!(approving(&fresh, "dave", "", approvers).is_empty());
    }

    #[test]
    fn a_later_request_for_changes_takes_an_approval_back() {
        use ReviewState::*;
        let reviews = [
            review("alice", Approved, "h"),
            review("alice", RequestChanges, "h"),
            review("bob", RequestChanges, "h"),
            review("bob", Approved, "h"),
            review("bob", Other, "h"),
        ];
        assert_eq!(approving(&reviews, "dave", "h", approvers), ["bob"]);
    }
}
