//! A change of inputs outside the spec (a rotated Secret) is a change: the next run plans.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;
use tfops_core::testing::FakeOp;

#[tokio::test]
async fn a_rotated_secret_makes_the_next_run_plan_instead_of_checking_drift() {
    let w = world();
    w.set_secret("team-a", "db", &[("password", "one")]);
    let key = w.create(object(
        "db",
        json!({"approvePlan": "auto", "varsFrom": [{"kind": "Secret", "name": "db"}]}),
    ));
    reconcile(&w, &key).await;
    assert_eq!(w.applies(&key), 1);
    let digest = w.object(&key).unwrap().status.last_applied_inputs_digest;
    assert_eq!(digest.as_ref().map(String::len), Some(64));
    let status = serde_json::to_string(&w.object(&key).unwrap().status).unwrap();
    assert!(
        !status.contains("one"),
        "no input value in status: {status}"
    );

    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(
        ready(&w, &key).1,
        "NoDrift",
        "nothing changed: a drift check"
    );
    assert_eq!(w.calls_of(&key, FakeOp::Plan), 1);

    w.set_secret("team-a", "db", &[("password", "two")]);
    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(
        w.calls_of(&key, FakeOp::Plan),
        2,
        "the rotation was planned"
    );
    assert_eq!(w.applies(&key), 2);
    assert_eq!(ready(&w, &key).1, "TerraformAppliedSucceed");
    assert_eq!(
        w.lock().infra[&key].real["terraform_data.var_password"],
        "\"two\""
    );
    assert_ne!(
        w.object(&key).unwrap().status.last_applied_inputs_digest,
        digest
    );

    w.advance(Duration::from_secs(601));
    reconcile(&w, &key).await;
    assert_eq!(ready(&w, &key).1, "NoDrift");
    assert_eq!(w.applies(&key), 2);
}

/// Secrets hold bytes: a binary value goes to a file mapping as it is, and a variable that is
/// not text is refused with the key named.
#[test]
fn binary_secret_data_reaches_files_untouched_and_variables_must_be_text() {
    use std::collections::BTreeMap;
    use tfops_core::api::VarsFromKind;
    use tfops_core::inputs::{DataSource, resolve};
    use tfops_core::ports::PortError;

    struct Data(BTreeMap<String, Vec<u8>>);
    impl DataSource for Data {
        fn data(&self, _: VarsFromKind, _: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
            (name == "keys").then(|| self.0.clone())
        }
    }
    let keystore = vec![0xfe, 0xed, 0xfe, 0xed, 0x00, 0xff];
    let data = Data(BTreeMap::from([
        ("keystore".to_string(), keystore.clone()),
        ("password".to_string(), b"hunter2".to_vec()),
    ]));
    let o = object(
        "app",
        json!({"fileMappings": [{"location": "workspace", "path": "ks.jks",
                                  "secretKeyRef": {"name": "keys", "key": "keystore"}}],
               "vars": [{"name": "pw", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "password"}}}]}),
    );
    let inputs = resolve(&o, &data).unwrap();
    assert_eq!(inputs.files[0].content, keystore);
    assert_eq!(inputs.vars["pw"], json!("hunter2"));

    let o = object(
        "app",
        json!({"vars": [{"name": "ks", "valueFrom": {"secretKeyRef": {"name": "keys", "key": "keystore"}}}]}),
    );
    let err = resolve(&o, &data).unwrap_err();
    assert!(
        matches!(&err, PortError::Invalid(m) if m.contains("key keystore of Secret team-a/keys is not UTF-8")),
        "{err:?}"
    );
}
