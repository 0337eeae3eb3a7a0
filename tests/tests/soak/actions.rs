//! What the objects' users do, one action at a time, chosen by the seed: commits, variable
//! edits, approvals of the current plan, of a stale plan and of a plan that never existed,
//! re-plans, suspends, moves to the other shard, deletions with and without destroy, the same
//! name created again.

use std::time::Duration;

use crate::run::record_change;
use crate::workload::{self, content_of};
use crate::{Soak, ledger};

/// One user action at random. Refusals (the API away, a conflict) are counted, not fatal.
pub(crate) async fn act(soak: &mut Soak) {
    let roll = soak.rng.u32(0..100);
    // At most 5 s each, as a user gives up on a hanging `kubectl` (the API server keeps a
    // request up to a minute while etcd is paused): the driver goes on healing faults.
    let (kind, result) = match tokio::time::timeout(Duration::from_secs(5), one(soak, roll)).await {
        Ok(done) => done,
        Err(_) => (kind_of(roll), Err("no answer within 5 s".to_string())),
    };
    let counts = soak.actions.entry(kind).or_default();
    match result {
        Ok(Some(what)) => {
            counts.0 += 1;
            soak.note(format!("{kind}: {what}"));
        }
        Ok(None) => {}
        Err(e) => {
            counts.1 += 1;
            soak.note(format!("{kind}: refused: {}", first_line(&e)));
        }
    }
}

fn kind_of(roll: u32) -> &'static str {
    match roll {
        0..23 => "commit",
        23..42 => "edit a variable",
        42..66 => "approve the current plan",
        66..71 => "approve a stale plan",
        71..76 => "approve a plan that never was",
        76..81 => "re-plan",
        81..86 => "suspend or resume",
        86..91 => "move to the other shard",
        91..96 => "delete",
        _ => "create again",
    }
}

async fn one(soak: &mut Soak, roll: u32) -> (&'static str, Done) {
    let kind = kind_of(roll);
    let result = match roll {
        0..23 => commit(soak),
        23..42 => edit(soak).await,
        42..66 => approve_current(soak).await,
        66..71 => approve_other(soak, true).await,
        71..76 => approve_other(soak, false).await,
        76..81 => replan(soak).await,
        81..86 => suspend(soak).await,
        86..91 => move_shard(soak).await,
        91..96 => delete(soak).await,
        _ => create_again(soak).await,
    };
    (kind, result)
}

fn first_line(e: &str) -> &str {
    e.lines().next().unwrap_or_default()
}

type Done = Result<Option<String>, String>;

/// An object index at random among those `fits`.
fn pick(soak: &mut Soak, fits: impl Fn(&workload::Object) -> bool) -> Option<usize> {
    let fitting: Vec<usize> = (0..soak.world.objects.len())
        .filter(|i| fits(&soak.world.objects[*i]))
        .collect();
    (!fitting.is_empty()).then(|| fitting[soak.rng.usize(..fitting.len())])
}

fn commit(soak: &mut Soak) -> Done {
    let i = soak.rng.usize(..soak.world.objects.len());
    let dir = soak.world.objects[i].dir();
    let rev = soak.world.rev_now(&dir) + 1;
    let config = ledger::config(soak.ledger.addr, rev, 2);
    let sha = soak
        .op
        .git
        .commit("soak", &[(&format!("{dir}/main.tf"), &config)]);
    soak.world.commits.push((sha.clone(), dir.clone(), rev));
    if soak.world.objects[i].alive {
        record_change(&mut soak.world, i, false, None);
    }
    Ok(Some(format!("{dir} rev {rev} at {sha:.8}")))
}

async fn edit(soak: &mut Soak) -> Done {
    let Some(i) = pick(soak, |o| o.alive) else {
        return Ok(None);
    };
    soak.world.objects[i].stamp += 1;
    // Refused: maybe written, maybe not; the generation it made (if any) is not known, so no
    // plan of it will be approved by the soak.
    workload::write(&mut soak.world, i, &soak.op.admin, &soak.repo_url).await?;
    record_change(&mut soak.world, i, false, None);
    Ok(Some(format!(
        "{} stamp {}",
        soak.world.objects[i].key(),
        soak.world.objects[i].stamp
    )))
}

/// The object's pending plan and the generation it was made at, unless it is being applied.
async fn pending(soak: &Soak, i: usize) -> Result<Option<(String, i64)>, String> {
    let o = &soak.world.objects[i];
    let t = workload::api(&soak.op.admin, o)
        .get(&o.name)
        .await
        .map_err(|e| e.to_string())?;
    let status = t.status.unwrap_or_default();
    let free = status.applying().is_none();
    let plan = status.plan;
    Ok((!plan.pending.is_empty() && free).then_some((plan.pending, plan.pending_generation)))
}

async fn approve_current(soak: &mut Soak) -> Done {
    let Some(i) = pick(soak, |o| o.alive && o.manual) else {
        return Ok(None);
    };
    let Some((plan, generation)) = pending(soak, i).await? else {
        return Ok(None);
    };
    // The content this plan stands for, as the user who reads it knows it; a plan of a
    // generation the soak does not know (its write's answer was lost) is left alone.
    let Some(content) = content_of(&soak.world, i, &plan, generation) else {
        return Ok(None);
    };
    record_change(&mut soak.world, i, true, Some(content.clone()));
    workload::approve(&mut soak.world, i, &plan, &soak.op.admin).await?;
    Ok(Some(format!(
        "{} {plan} ({content})",
        soak.world.objects[i].key()
    )))
}

/// Approves a plan id that is not the pending one: of another commit (`stale`) or made up.
async fn approve_other(soak: &mut Soak, stale: bool) -> Done {
    let Some(i) = pick(soak, |o| o.alive && o.manual) else {
        return Ok(None);
    };
    let pending = pending(soak, i).await?.map(|p| p.0).unwrap_or_default();
    let sha_now = pending.rsplit('-').next().unwrap_or_default().to_string();
    let prefix = pending
        .strip_suffix(sha_now.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("plan-main-")
        .to_string();
    let other = if stale {
        let older: Vec<String> = soak
            .world
            .commits
            .iter()
            .map(|c| c.0.clone())
            .filter(|c| sha_now.is_empty() || !c.starts_with(&sha_now))
            .collect();
        if older.is_empty() {
            return Ok(None);
        }
        let sha = &older[soak.rng.usize(..older.len())];
        format!("{prefix}{}", &sha[..sha_now.len().clamp(7, sha.len())])
    } else {
        let made_up: String = (0..10)
            .map(|_| char::from_digit(soak.rng.u32(0..16), 16).unwrap_or('0'))
            .collect();
        format!("{prefix}{made_up}")
    };
    workload::approve(&mut soak.world, i, &other, &soak.op.admin).await?;
    Ok(Some(format!(
        "{} {other} (pending: {pending})",
        soak.world.objects[i].key()
    )))
}

async fn replan(soak: &mut Soak) -> Done {
    let Some(i) = pick(soak, |o| o.alive) else {
        return Ok(None);
    };
    workload::replan(&mut soak.world, i, &soak.op.admin).await?;
    Ok(Some(soak.world.objects[i].key()))
}

async fn suspend(soak: &mut Soak) -> Done {
    let Some(i) = pick(soak, |o| o.alive) else {
        return Ok(None);
    };
    let o = &mut soak.world.objects[i];
    o.suspended = !o.suspended;
    let now = o.suspended;
    if let Err(e) = workload::write(&mut soak.world, i, &soak.op.admin, &soak.repo_url).await {
        soak.world.objects[i].suspended = !now;
        return Err(e);
    }
    Ok(Some(format!(
        "{} suspended: {now}",
        soak.world.objects[i].key()
    )))
}

/// Moves an object to the other shard (its label): the old shard's leader lets it go, the
/// new one's takes it up, an apply under way included.
async fn move_shard(soak: &mut Soak) -> Done {
    let Some(i) = pick(soak, |o| o.alive) else {
        return Ok(None);
    };
    let before = soak.world.objects[i].shard.clone();
    let after = match before {
        Some(_) => None,
        None => Some(workload::SHARD.to_string()),
    };
    soak.world.objects[i].shard = after.clone();
    if let Err(e) = workload::write(&mut soak.world, i, &soak.op.admin, &soak.repo_url).await {
        soak.world.objects[i].shard = before;
        return Err(e);
    }
    Ok(Some(format!(
        "{} to shard {}",
        soak.world.objects[i].key(),
        after.as_deref().unwrap_or("(default)")
    )))
}

async fn delete(soak: &mut Soak) -> Done {
    // Not one that others depend on: tfops holds its deletion until they are gone
    // (`DeletionBlockedByDependants`, tested on its own), and the soak's users do not wait.
    let depended: Vec<String> = soak
        .world
        .objects
        .iter()
        .filter(|o| o.alive)
        .filter_map(|o| o.depends_on.clone())
        .collect();
    let Some(i) = pick(soak, |o| o.alive && !depended.contains(&o.name)) else {
        return Ok(None);
    };
    let destroy = soak.rng.bool();
    soak.world.objects[i].destroy_on_delete = destroy;
    workload::write(&mut soak.world, i, &soak.op.admin, &soak.repo_url).await?;
    workload::delete(&soak.world, i, &soak.op.admin).await?;
    soak.world.objects[i].alive = false;
    Ok(Some(format!(
        "{} (destroy: {destroy})",
        soak.world.objects[i].owner()
    )))
}

async fn create_again(soak: &mut Soak) -> Done {
    let Some(i) = pick(soak, |o| !o.alive) else {
        return Ok(None);
    };
    if !workload::gone(&soak.world, i, &soak.op.admin).await {
        return Ok(None);
    }
    recreate(soak, i).await
}

/// Creates deleted object `i` again under its name: a new incarnation.
pub(crate) async fn recreate(soak: &mut Soak, i: usize) -> Done {
    let o = &mut soak.world.objects[i];
    o.incarnation += 1;
    o.stamp += 1;
    o.stamps.clear();
    o.suspended = false;
    o.destroy_on_delete = false;
    if let Err(e) = workload::write(&mut soak.world, i, &soak.op.admin, &soak.repo_url).await {
        soak.world.objects[i].incarnation -= 1;
        return Err(e);
    }
    soak.world.objects[i].alive = true;
    record_change(&mut soak.world, i, false, None);
    Ok(Some(soak.world.objects[i].owner()))
}
