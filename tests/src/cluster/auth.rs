//! Who a request is and what it may do, as the real server decides it:
//! - **authentication** by bearer token: the admin's (user `admin`, group `system:masters`),
//!   tokens a test mints for a user and groups, and ServiceAccount tokens (the `TokenRequest`
//!   subresource, or what the kubelet stand-in gives a Pod), valid while the ServiceAccount
//!   exists with the `uid` it had when the token was issued;
//! - **authorization** by RBAC: `system:masters` may do anything; everyone else gets what the
//!   Roles and ClusterRoles bound to them (RoleBindings in the request's namespace,
//!   ClusterRoleBindings everywhere) allow, by API group, resource, subresource, verb and
//!   resource name; discovery, `/version` and self access reviews are open to every
//!   authenticated user (the bootstrap `system:discovery` and `system:basic-user` roles).
//!   A refusal is a 403 `Forbidden` worded as the real one.

use std::collections::HashMap;

use serde_json::Value;

use super::errors::ApiError;
use super::store::{Key, Store};

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user name (`system:serviceaccount:<namespace>:<name>` for ServiceAccounts).
    pub user: String,
    /// Its groups.
    pub groups: Vec<String>,
}

impl Identity {
    /// The admin: group `system:masters`, which RBAC never refuses.
    pub fn admin() -> Self {
        Self {
            user: "admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    /// The identity of the ServiceAccount `name` in `namespace`.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// What a token stands for.
#[derive(Debug, Clone)]
enum Holder {
    /// A user with groups.
    User(Identity),
    /// A ServiceAccount, while it exists with this `uid`.
    ServiceAccount {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// The tokens the server accepts.
#[derive(Debug, Default)]
pub struct Tokens {
    by_token: HashMap<String, Holder>,
    issued: u64,
}

impl Tokens {
    fn fresh(&mut self, prefix: &str) -> String {
        self.issued += 1;
        let nanos = jiff::Timestamp::now().as_nanosecond();
        format!("{prefix}-{}-{nanos:x}", self.issued)
    }

    /// Accepts `token` as the admin's.
    pub fn add_admin(&mut self, token: &str) {
        self.by_token
            .insert(token.to_string(), Holder::User(Identity::admin()));
    }

    /// A new token for `identity`.
    pub fn mint_user(&mut self, identity: Identity) -> String {
        let token = self.fresh("user");
        self.by_token.insert(token.clone(), Holder::User(identity));
        token
    }

    /// A new token for the ServiceAccount `name` in `namespace`, if it exists.
    pub fn mint_service_account(
        &mut self,
        store: &Store,
        namespace: &str,
        name: &str,
    ) -> Option<String> {
        let sa = store.get(&Key {
            resource: "serviceaccounts".into(),
            namespace: namespace.into(),
            name: name.into(),
        })?;
        let uid = sa["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let token = self.fresh("sa");
        self.by_token.insert(
            token.clone(),
            Holder::ServiceAccount {
                namespace: namespace.into(),
                name: name.into(),
                uid,
            },
        );
        Some(token)
    }

    /// Who `token` is, if anyone.
    pub fn authenticate(&self, store: &Store, token: &str) -> Option<Identity> {
        match self.by_token.get(token)? {
            Holder::User(i) => Some(i.clone()),
            Holder::ServiceAccount {
                namespace,
                name,
                uid,
            } => {
                let sa = store.get(&Key {
                    resource: "serviceaccounts".into(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                })?;
                (sa["metadata"]["uid"].as_str() == Some(uid.as_str()))
                    .then(|| Identity::service_account(namespace, name))
            }
        }
    }
}

/// What a request does, in RBAC's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The API group.
    pub group: String,
    /// The resource (plural).
    pub resource: String,
    /// The subresource, or empty.
    pub subresource: String,
    /// The namespace, or empty (cluster scope).
    pub namespace: String,
    /// The object's name, or empty.
    pub name: String,
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let has = |field: &str, want: &str| {
        strings(&rule[field])
            .iter()
            .any(|v| *v == "*" || *v == want)
    };
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let resource_ok = strings(&rule["resources"]).iter().any(|r| {
        *r == "*"
            || *r == resource
            || (a.subresource.is_empty() && *r == a.resource)
            || r.strip_prefix("*/") == Some(a.subresource.as_str()) && !a.subresource.is_empty()
    });
    let names = strings(&rule["resourceNames"]);
    has("verbs", &a.verb)
        && has("apiGroups", &a.group)
        && resource_ok
        && (names.is_empty() || (!a.name.is_empty() && names.contains(&a.name.as_str())))
}

fn subject_matches(subject: &Value, who: &Identity, binding_namespace: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or("");
    match subject["kind"].as_str() {
        Some("User") => name == who.user,
        Some("Group") => who.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_namespace);
            who.user == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// The rules of the role a binding names (a Role in the binding's namespace, or a
/// ClusterRole).
fn role_rules<'a>(store: &'a Store, binding: &Value, namespace: &str) -> Vec<&'a Value> {
    let name = binding["roleRef"]["name"].as_str().unwrap_or("");
    let key = match binding["roleRef"]["kind"].as_str() {
        Some("Role") => Key {
            resource: "roles.rbac.authorization.k8s.io".into(),
            namespace: namespace.into(),
            name: name.into(),
        },
        Some("ClusterRole") => Key {
            resource: "clusterroles.rbac.authorization.k8s.io".into(),
            namespace: String::new(),
            name: name.into(),
        },
        _ => return Vec::new(),
    };
    store
        .get(&key)
        .and_then(|r| r["rules"].as_array())
        .map(|rules| rules.iter().collect())
        .unwrap_or_default()
}

/// Whether RBAC allows `who` to do `a`.
pub fn allowed(store: &Store, who: &Identity, a: &Attributes) -> bool {
    if who.is_master() {
        return true;
    }
    let bound = |binding: &Value, ns: &str| {
        binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| subject_matches(s, who, ns))
    };
    for binding in store.list("clusterrolebindings.rbac.authorization.k8s.io", None) {
        if bound(binding, "")
            && role_rules(store, binding, "")
                .iter()
                .any(|r| rule_allows(r, a))
        {
            return true;
        }
    }
    if a.namespace.is_empty() {
        return false;
    }
    for binding in store.list("rolebindings.rbac.authorization.k8s.io", Some(&a.namespace)) {
        if bound(binding, &a.namespace)
            && role_rules(store, binding, &a.namespace)
                .iter()
                .any(|r| rule_allows(r, a))
        {
            return true;
        }
    }
    false
}

/// 403 `Forbidden` for `who` doing `a`, worded as the real server words it.
pub fn forbidden(who: &Identity, a: &Attributes) -> ApiError {
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    let why = format!(
        "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        who.user, a.verb, a.group
    );
    ApiError::forbidden(&a.resource, &a.group, &a.name, why)
}

/// The ClusterRoles every cluster starts with that our deployment and tests bind to.
pub fn bootstrap_roles() -> Vec<Value> {
    vec![serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "cluster-admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
        "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    })]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn attrs(verb: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: String::new(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: "team-a".into(),
            name: name.into(),
        }
    }

    #[test]
    fn rules_match_by_verb_resource_subresource_and_name() {
        let rule = serde_json::json!({
            "apiGroups": [""], "resources": ["secrets", "pods/log"],
            "verbs": ["get"], "resourceNames": ["db"],
        });
        assert!(rule_allows(&rule, &attrs("get", "secrets", "", "db")));
        assert!(!rule_allows(&rule, &attrs("get", "secrets", "", "other")));
        assert!(!rule_allows(&rule, &attrs("list", "secrets", "", "")));
        assert!(!rule_allows(&rule, &attrs("get", "pods", "", "db")));
        assert!(rule_allows(&rule, &attrs("get", "pods", "log", "db")));
        assert!(!rule_allows(
            &rule,
            &attrs("get", "secrets", "status", "db")
        ));
        let any = serde_json::json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]});
        assert!(rule_allows(&any, &attrs("delete", "pods", "status", "x")));
    }

    #[test]
    fn the_refusal_is_worded_as_the_real_one() {
        let who = Identity::service_account("team-a", "tf-runner");
        let e = forbidden(&who, &attrs("get", "secrets", "", "db"));
        assert_eq!(
            e.message,
            "secrets \"db\" is forbidden: User \"system:serviceaccount:team-a:tf-runner\" cannot get resource \"secrets\" in API group \"\" in the namespace \"team-a\""
        );
        assert_eq!((e.code, e.reason), (403, "Forbidden"));
    }
}
