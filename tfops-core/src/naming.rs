//! Every name tfops derives, one function each, within Kubernetes' limits: object names are
//! DNS-1123 subdomains (at most 253 characters), label values and Pod host names at most 63.
//! A name that would be too long is cut and ends with a stable hash of the full name, so two
//! long names never collide and the same input always gives the same name.

use sha2::{Digest, Sha256};

/// The longest object name (DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;
/// The longest label value or DNS label.
pub const MAX_LABEL: usize = 63;
/// The per-namespace Secret holding the runner's server certificate (`ca.crt`, `tls.crt`,
/// `tls.key`; never the CA's key).
pub const RUNNER_TLS_SECRET: &str = "terraform-runner.tls";
/// How many hex digits of a source SHA a plan id keeps.
pub const PLAN_ID_SHA_LEN: usize = 10;
const HASH_LEN: usize = 10;

fn hash_hex(text: &str, len: usize) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(len)
        .map(|n| char::from_digit(u32::from(n), 16).unwrap_or('0'))
        .collect()
}

/// Returns `name` if it fits in `max` characters, else a prefix of it followed by `-` and a
/// 10-digit hash of the whole name. The result never ends in `-` or `.` before the hash.
pub fn shorten(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let keep = max.saturating_sub(HASH_LEN + 1);
    // Cut on a char boundary; derived names are ASCII, but stay correct for any input.
    let mut cut = keep.min(name.len());
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let prefix = name[..cut].trim_end_matches(['-', '.']);
    format!("{prefix}-{}", hash_hex(name, HASH_LEN))
}

/// `<name>-tf-runner`: the runner Pod (a host name, so at most 63 characters).
pub fn runner_pod_name(object_name: &str) -> String {
    shorten(&format!("{object_name}-tf-runner"), MAX_LABEL)
}

/// `<name>-tf-runner-apply`: the apply runner Pod of an object with `spec.runner.apply`.
pub fn apply_runner_pod_name(object_name: &str) -> String {
    shorten(&format!("{object_name}-tf-runner-apply"), MAX_LABEL)
}

/// `<name>-tf-runner-pr`: the runner Pod of a pull request's speculative plan of the object
/// (one at a time per object).
pub fn pull_request_runner_pod_name(object_name: &str) -> String {
    shorten(&format!("{object_name}-tf-runner-pr"), MAX_LABEL)
}

/// The host name of the runner Pod `pod` in `namespace` (its `spec.hostname`): the Pod's name
/// (shortened) and a hash of namespace and name, so that no other Pod in the cluster has it.
/// Terraform names a lock's holder `user@host`; a lock whose host is this object's runner is
/// then this object's runner's, whatever other namespaces hold.
pub fn runner_host(namespace: &str, pod: &str) -> String {
    let prefix = shorten(pod, MAX_LABEL - HASH_LEN - 1);
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!(
        "{prefix}-{}",
        hash_hex(&format!("{namespace}/{pod}"), HASH_LEN)
    )
}

/// Whether a state lock's holder (Terraform's `Who`, `user@host`) names the host of a runner
/// Pod of the object `namespace/name` ([`runner_host`] of its plan or apply runner).
pub fn held_by_own_runner(namespace: &str, name: &str, holder: &str) -> bool {
    [runner_pod_name(name), apply_runner_pod_name(name)]
        .iter()
        .any(|pod| held_by_pod(namespace, pod, holder))
}

/// Whether a state lock's holder (`user@host`) names the host of runner Pod `pod` in
/// `namespace` ([`runner_host`]).
pub fn held_by_pod(namespace: &str, pod: &str, holder: &str) -> bool {
    holder
        .rsplit_once('@')
        .is_some_and(|(_, host)| host == runner_host(namespace, pod))
}

/// `tfstate-<workspace>-<suffix>`: the state Secret the Kubernetes backend writes. Not
/// shortened: Terraform derives it the same way, so tfops must name exactly what Terraform
/// wrote (validation keeps workspace and suffix within label limits).
pub fn state_secret_name(workspace: &str, suffix: &str) -> String {
    format!("tfstate-{workspace}-{suffix}")
}

/// `lock-tfstate-<workspace>-<suffix>`: the Lease the Kubernetes backend locks state with.
pub fn state_lease_name(workspace: &str, suffix: &str) -> String {
    format!("lock-{}", state_secret_name(workspace, suffix))
}

/// `tfplan-<workspace>-<name>`: the Secret (or first of the Secrets) holding the binary plan.
pub fn plan_secret_name(workspace: &str, object_name: &str) -> String {
    // Room for "-readable" and chunk suffixes, so every derived plan object stays valid.
    shorten(&format!("tfplan-{workspace}-{object_name}"), MAX_NAME - 20)
}

/// `tfplan-<workspace>-<name>-readable`: the ConfigMap with the human-readable plan.
pub fn readable_plan_name(workspace: &str, object_name: &str) -> String {
    format!("{}-readable", plan_secret_name(workspace, object_name))
}

/// `plan-<ref>-<first 10 of sha>`: the id a human approves. The ref is lowercased and reduced
/// to `a-z 0-9 . -` (so `feature/X` becomes `feature-x`), and the id fits in a label value.
pub fn plan_id(reference: &str, sha: &str) -> String {
    let mut clean: String = reference
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    clean = clean.trim_matches(['-', '.']).to_string();
    if clean.is_empty() {
        clean = "ref".into();
    }
    let short_sha: String = sha
        .to_ascii_lowercase()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(PLAN_ID_SHA_LEN)
        .collect();
    let short_sha = format!("{short_sha:0<width$}", width = PLAN_ID_SHA_LEN);
    let room = MAX_LABEL - "plan-".len() - 1 - PLAN_ID_SHA_LEN;
    format!("plan-{}-{short_sha}", shorten(&clean, room))
}

/// Whether `id` has the shape [`plan_id`] produces.
pub fn is_plan_id(id: &str) -> bool {
    let Some(rest) = id.strip_prefix("plan-") else {
        return false;
    };
    let Some((reference, sha)) = rest.rsplit_once('-') else {
        return false;
    };
    id.len() <= MAX_LABEL
        && sha.len() == PLAN_ID_SHA_LEN
        && sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && is_label_value(reference)
}

/// Whether `s` is a non-empty label value: at most 63 of `a-z 0-9 - .`, alphanumeric at both
/// ends (lowercase only, as object names need).
pub fn is_label_value(s: &str) -> bool {
    let ok_char = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.';
    let ok_end = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.bytes().all(ok_char)
        && ok_end(s.bytes().next())
        && ok_end(s.bytes().last())
}

/// Whether `s` is a ConfigMap (or Secret) data key: at most 253 of `-._a-zA-Z0-9`, and not
/// `.`, `..` or starting with `..`.
pub fn is_config_map_key(s: &str) -> bool {
    let ok_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_');
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.bytes().all(ok_char)
        && s != "."
        && !s.starts_with("..")
}

/// Whether `s` is a DNS-1123 subdomain (an object name).
pub fn is_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_NAME
        && s.split('.')
            .all(|part| is_label_value(part) && !part.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_follow_the_seed() {
        assert_eq!(runner_pod_name("vpc"), "vpc-tf-runner");
        let host = runner_host("team-a", "vpc-tf-runner");
        assert!(host.starts_with("vpc-tf-runner-") && host.len() == "vpc-tf-runner".len() + 11);
        assert_ne!(host, runner_host("team-b", "vpc-tf-runner"));
        let long = runner_host("team-a", &runner_pod_name(&"x".repeat(90)));
        assert!(long.len() <= 63 && !long.contains("--"), "{long}");
        assert_eq!(apply_runner_pod_name("vpc"), "vpc-tf-runner-apply");
        assert!(apply_runner_pod_name(&"a".repeat(80)).len() <= MAX_LABEL);
        assert_ne!(
            apply_runner_pod_name(&"a".repeat(80)),
            runner_pod_name(&"a".repeat(80))
        );
        assert_eq!(state_secret_name("default", "vpc"), "tfstate-default-vpc");
        assert_eq!(
            state_lease_name("default", "vpc"),
            "lock-tfstate-default-vpc"
        );
        assert_eq!(plan_secret_name("default", "vpc"), "tfplan-default-vpc");
        assert_eq!(
            readable_plan_name("default", "vpc"),
            "tfplan-default-vpc-readable"
        );
        assert_eq!(
            plan_id("main", "0123456789abcdef0123456789abcdef01234567"),
            "plan-main-0123456789"
        );
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let long = "a".repeat(80);
        let pod = runner_pod_name(&long);
        assert_eq!(pod.len(), MAX_LABEL);
        assert_eq!(pod, runner_pod_name(&long));
        assert_ne!(pod, runner_pod_name(&"a".repeat(81)));
        assert!(is_label_value(&pod));
    }

    #[test]
    fn plan_ids_are_clean_and_recognised() {
        let id = plan_id("Feature/Add_VPC", "ABCDEF0123456789");
        assert_eq!(id, "plan-feature-add-vpc-abcdef0123");
        assert!(is_plan_id(&id));
        let long = plan_id(&"release-".repeat(20), "0123456789abcdef");
        assert!(long.len() <= MAX_LABEL && is_plan_id(&long), "{long}");
        for bad in [
            "plan-main",
            "plan--0123456789",
            "main-0123456789",
            "plan-main-012345678g",
            "plan-Main-0123456789",
        ] {
            assert!(!is_plan_id(bad), "{bad}");
        }
    }

    #[test]
    fn label_and_subdomain_rules() {
        assert!(is_label_value("default"));
        assert!(!is_label_value("-x"));
        assert!(!is_label_value(&"a".repeat(64)));
        assert!(is_subdomain("my.outputs"));
        assert!(is_config_map_key("db.Host_1-a"));
        for bad in ["", ".", "..", "..x", "a b", "a/b", "a:b"] {
            assert!(!is_config_map_key(bad), "{bad:?}");
        }
        assert!(!is_config_map_key(&"k".repeat(254)));
        assert!(!is_subdomain("My_Outputs"));
    }
}
