//! The Terraform state as the kubernetes backend keeps it, read as tests check it.

use super::operator::Operator;

/// The resources of the Terraform state in the object's state Secret: address → id.
pub async fn state_ids(op: &Operator, name: &str) -> std::collections::BTreeMap<String, String> {
    use std::io::Read;
    let secrets: kube::api::Api<k8s_openapi::api::core::v1::Secret> =
        kube::api::Api::namespaced(op.admin.clone(), "team-a");
    let Some(secret) = secrets
        .get_opt(&format!("tfstate-default-{name}"))
        .await
        .unwrap()
    else {
        return Default::default();
    };
    let gz = &secret.data.as_ref().unwrap()["tfstate"].0;
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap();
    let state: serde_json::Value = serde_json::from_str(&text).unwrap();
    state["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                format!(
                    "{}.{}",
                    r["type"].as_str().unwrap(),
                    r["name"].as_str().unwrap()
                ),
                r["instances"][0]["attributes"]["id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}
