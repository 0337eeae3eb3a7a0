//! ResourceQuotas as the queue for runner Pods reads them: the room a namespace's quotas leave
//! for more Pods, and a quota's refusal in words a person reads ("the ResourceQuota pods in
//! team-a allows no more Pods (used 1 of 1)").

use k8s_openapi::api::core::v1::ResourceQuota;

/// The resource names that count Pods.
const POD_COUNTS: [&str; 2] = ["pods", "count/pods"];

/// How many more Pods a namespace's quotas allow, and the quota that allows fewest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    /// More Pods allowed (`None`: no quota counts Pods in a way read here).
    pub free: Option<u64>,
    /// The quota that allows fewest: its name, Pods used and Pods allowed.
    pub tightest: Option<(String, u64, u64)>,
}

/// The room `quotas` (one namespace's) leave for more Pods. Only quotas that count every Pod
/// are read: a quota with scopes (`BestEffort`, `Terminating`, a priority class...) may not
/// apply to runner Pods, and what it refuses is left to the waiters' own retries. A count is
/// read from `status` (what admission enforces), as a whole number.
pub fn room<'a>(quotas: impl IntoIterator<Item = &'a ResourceQuota>) -> Room {
    let mut room = Room {
        free: None,
        tightest: None,
    };
    for quota in quotas {
        let Some((used, hard)) = pod_count(quota) else {
            continue;
        };
        let free = hard.saturating_sub(used);
        if room.free.is_none_or(|f| free < f) {
            room.free = Some(free);
            let name = quota.metadata.name.clone().unwrap_or_default();
            room.tightest = Some((name, used, hard));
        }
    }
    room
}

impl Room {
    /// Why an object at a place past the room waits, for its `Ready` message.
    pub fn why(&self, namespace: &str, free: u64) -> String {
        let Some((name, used, hard)) = &self.tightest else {
            return format!("the ResourceQuotas in {namespace} allow no more Pods");
        };
        match free {
            0 => format!(
                "the ResourceQuota {name} in {namespace} allows no more Pods (used {used} of {hard})"
            ),
            1 => format!(
                "the ResourceQuota {name} in {namespace} allows 1 more Pod, for an object waiting longer"
            ),
            n => format!(
                "the ResourceQuota {name} in {namespace} allows {n} more Pods, for objects waiting longer"
            ),
        }
    }
}

/// Pods used and allowed by a quota that counts every Pod.
fn pod_count(quota: &ResourceQuota) -> Option<(u64, u64)> {
    let spec = quota.spec.as_ref();
    let scoped = spec.is_some_and(|s| {
        s.scopes.as_ref().is_some_and(|v| !v.is_empty()) || s.scope_selector.is_some()
    });
    if scoped {
        return None;
    }
    let status = quota.status.as_ref()?;
    let (key, hard) = POD_COUNTS.iter().find_map(|key| {
        let hard = status.hard.as_ref()?.get(*key)?;
        Some((*key, hard.0.parse::<u64>().ok()?))
    })?;
    let used = status
        .used
        .as_ref()
        .and_then(|u| u.get(key))
        .map_or(Some(0), |q| q.0.parse::<u64>().ok())?;
    Some((used, hard))
}

/// Quota admission's refusal (`pods "x" is forbidden: exceeded quota: <name>, requested:
/// <r>, used: <u>, limited: <l>`) as a person reads it.
pub fn refusal(namespace: &str, message: &str) -> String {
    parse(message).map_or_else(
        || format!("a ResourceQuota in {namespace} refused the runner Pod: {message}"),
        |(name, requested, used, limited)| {
            let all_pods = requested
                .iter()
                .all(|(k, _)| POD_COUNTS.contains(&k.as_str()));
            let value = |list: &[(String, String)]| {
                list.iter()
                    .find(|(k, _)| POD_COUNTS.contains(&k.as_str()))
                    .map(|(_, v)| v.clone())
            };
            match (all_pods, value(&used), value(&limited)) {
                (true, Some(u), Some(l)) => format!(
                    "the ResourceQuota {name} in {namespace} allows no more Pods (used {u} of {l})"
                ),
                _ => format!(
                    "the ResourceQuota {name} in {namespace} has no room for the runner Pod (requested {}, used {}, limited to {})",
                    join(&requested),
                    join(&used),
                    join(&limited)
                ),
            }
        },
    )
}

type Usage = Vec<(String, String)>;

fn parse(message: &str) -> Option<(String, Usage, Usage, Usage)> {
    let (_, rest) = message.split_once("exceeded quota: ")?;
    let (name, rest) = rest.split_once(", requested: ")?;
    let (requested, rest) = rest.split_once(", used: ")?;
    let (used, limited) = rest.split_once(", limited: ")?;
    let list = |text: &str| -> Usage {
        text.split(',')
            .filter_map(|p| p.trim().split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    Some((name.to_string(), list(requested), list(used), list(limited)))
}

fn join(list: &[(String, String)]) -> String {
    list.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn quota(name: &str, value: serde_json::Value) -> ResourceQuota {
        let mut v = serde_json::json!({"metadata": {"name": name}});
        v.as_object_mut()
            .unwrap()
            .extend(value.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_room_is_the_tightest_pod_count_of_the_quotas_that_count_every_pod() {
        let pods = quota(
            "pods",
            serde_json::json!({"status": {"hard": {"pods": "3"}, "used": {"pods": "2"}}}),
        );
        let tight = quota(
            "tight",
            serde_json::json!({"status": {"hard": {"count/pods": "1"}, "used": {"count/pods": "1"}}}),
        );
        let scoped = quota(
            "best-effort",
            serde_json::json!({"spec": {"scopes": ["BestEffort"]}, "status": {"hard": {"pods": "0"}}}),
        );
        let cpu = quota(
            "cpu",
            serde_json::json!({"status": {"hard": {"requests.cpu": "1"}}}),
        );
        assert_eq!(
            room([&pods]),
            Room {
                free: Some(1),
                tightest: Some(("pods".into(), 2, 3))
            }
        );
        assert_eq!(room([&pods, &tight, &scoped, &cpu]).free, Some(0));
        assert_eq!(room([&scoped, &cpu]).free, None);
        let r = room([&pods, &tight]);
        assert_eq!(
            r.why("team-a", 0),
            "the ResourceQuota tight in team-a allows no more Pods (used 1 of 1)"
        );
        assert_eq!(
            room([&pods]).why("team-a", 1),
            "the ResourceQuota pods in team-a allows 1 more Pod, for an object waiting longer"
        );
    }

    #[test]
    fn refusals_are_said_in_words() {
        let pods = r#"pods "vpc-tf-runner" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1"#;
        assert_eq!(
            refusal("team-a", pods),
            "the ResourceQuota pods in team-a allows no more Pods (used 1 of 1)"
        );
        let cpu = r#"pods "vpc-tf-runner" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, used: requests.cpu=1, limited: requests.cpu=1"#;
        assert_eq!(
            refusal("team-a", cpu),
            "the ResourceQuota compute in team-a has no room for the runner Pod (requested requests.cpu=500m, used requests.cpu=1, limited to requests.cpu=1)"
        );
        assert_eq!(
            refusal("team-a", "exceeded quota somehow"),
            "a ResourceQuota in team-a refused the runner Pod: exceeded quota somehow"
        );
    }
}
