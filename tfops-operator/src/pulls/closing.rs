//! The plans a look removes: another head's (replaced by the new one's), one of a pull request
//! that no longer touches the object, and a closed pull request's, but for a merged one's
//! approved plan, which is kept and followed until it is applied.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tfops_core::ports::PortError;
use tfops_core::pulls::{Forge, Merged, PlanRef};
use tfops_kube::pull_plans::StoredPullPlan;

use super::approvals::{Teams, keep_merged};
use super::{Group, Open, Shared};

/// A look's removals, and what they learnt.
pub(crate) struct Closing<'a> {
    pub(crate) shared: &'a Arc<Shared>,
    pub(crate) group: &'a Group,
    pub(crate) forge: &'a dyn Forge,
    pub(crate) open: &'a [Open],
    pub(crate) stored: &'a [StoredPullPlan],
    /// Team members read during this look.
    pub(crate) teams: Teams,
    merges: BTreeMap<u64, Option<Merged>>,
    /// Pull requests closed, whose comment says so.
    pub(crate) closed: BTreeSet<u64>,
    /// Merged pull requests with an approved plan kept (their comment follows it instead).
    kept: BTreeSet<u64>,
}

impl<'a> Closing<'a> {
    pub(crate) fn new(
        shared: &'a Arc<Shared>,
        group: &'a Group,
        forge: &'a dyn Forge,
        open: &'a [Open],
        stored: &'a [StoredPullPlan],
    ) -> Self {
        Self {
            shared,
            group,
            forge,
            open,
            stored,
            teams: Teams::default(),
            merges: BTreeMap::new(),
            closed: BTreeSet::new(),
            kept: BTreeSet::new(),
        }
    }

    /// Removes `plan` (cancelling it if under way), or keeps it for the merge.
    pub(crate) async fn remove(&mut self, plan: PlanRef) -> Result<(), PortError> {
        let shared = self.shared;
        shared.tasks.cancel(&self.group.id, &plan);
        let still = self.open.iter().any(|o| {
            o.pull.number == plan.number && o.touched.iter().any(|(t, _)| t.key == plan.key)
        });
        let is_open = self.open.iter().any(|o| o.pull.number == plan.number);
        let record = self.stored.iter().find(|s| s.plan_ref == plan);
        let kept = match record {
            Some(record) if !is_open => match self.merged(plan.number).await? {
                Some(merged) => {
                    keep_merged(
                        shared,
                        self.group,
                        self.forge,
                        record,
                        &merged,
                        &mut self.teams,
                    )
                    .await?
                }
                None => false,
            },
            _ => false,
        };
        if kept {
            self.kept.insert(plan.number);
            // Followed from the next look on, which says what came of it.
            shared.nudge.repository_id(&self.group.id);
            return Ok(());
        }
        if !still {
            shared.store.delete(&plan.key, plan.number).await?;
        }
        if !is_open {
            self.closed.insert(plan.number);
        }
        Ok(())
    }

    async fn merged(&mut self, number: u64) -> Result<Option<Merged>, PortError> {
        if let Some(known) = self.merges.get(&number) {
            return Ok(known.clone());
        }
        let merged = self.forge.merged(number).await?;
        self.merges.insert(number, merged.clone());
        Ok(merged)
    }

    /// Says on each closed pull request that it closed (not on one whose approved plan is
    /// followed).
    pub(crate) async fn say_closed(&self) -> Result<(), PortError> {
        for number in self.closed.difference(&self.kept) {
            super::publish::closed(self.shared, self.group, self.forge, *number).await?;
        }
        Ok(())
    }
}
