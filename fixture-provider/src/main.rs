//! `terraform-provider-aws` (stand-in): a Terraform provider speaking plugin protocol 6 that
//! plans and "applies" AWS-shaped resources without any cloud, so the starter policies in
//! `examples/policies/` are tested against plan JSON made by real Terraform. It is installed from
//! a filesystem mirror under the source address `tfops.local/fixtures/aws` and never pretends to
//! be `hashicorp/aws`: the plan names the provider it came from.

mod kinds;
mod provider;
mod resource;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tf_provider::serve("aws", provider::StandIn)
        .await
        .map_err(|e| e.into())
}
