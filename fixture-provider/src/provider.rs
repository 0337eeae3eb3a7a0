//! The provider: no configuration, the resource types of [`crate::kinds::KINDS`].

use std::collections::HashMap;

use async_trait::async_trait;
use tf_provider::schema::{Block, Schema};
use tf_provider::value::ValueEmpty;
use tf_provider::{Diagnostics, DynamicResource, Provider};

use crate::kinds::KINDS;
use crate::resource::Generic;

/// The stand-in provider.
pub struct StandIn;

#[async_trait]
impl Provider for StandIn {
    type Config<'a> = ValueEmpty;
    type MetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        Some(Schema {
            version: 1,
            block: Block::default(),
        })
    }

    async fn configure<'a>(
        &self,
        _diags: &mut Diagnostics,
        _terraform_version: String,
        _config: ValueEmpty,
    ) -> Option<()> {
        Some(())
    }

    fn get_resources(
        &self,
        _diags: &mut Diagnostics,
    ) -> Option<HashMap<String, Box<dyn DynamicResource>>> {
        Some(
            KINDS
                .iter()
                .map(|k| {
                    (
                        k.name.to_string(),
                        Box::new(Generic(k)) as Box<dyn DynamicResource>,
                    )
                })
                .collect(),
        )
    }
}
