//! One generic resource: it keeps what the configuration says, computes an `id`, and asks for a
//! replacement when an attribute that forces one changes.

use std::collections::BTreeMap;

use async_trait::async_trait;
use tf_provider::schema::{Attribute, AttributeConstraint, AttributeType, Block, Schema};
use tf_provider::value::{ValueAny, ValueEmpty};
use tf_provider::{AttributePath, Diagnostics, Resource};

use crate::kinds::{Kind, attribute, block};

/// A resource's state: every attribute of its schema by name.
pub type State = BTreeMap<String, ValueAny>;

/// A resource type of [`crate::kinds::KINDS`].
pub struct Generic(pub &'static Kind);

/// A stable id for a new resource: its type and its first attribute's value (the identifier,
/// name or bucket of the real provider), so regenerated fixtures keep the same ids.
fn id_for(kind: &Kind, state: &State) -> String {
    let key = kind
        .attrs
        .first()
        .and_then(|a| match state.get(a.name) {
            Some(ValueAny::String(s)) => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_default();
    format!("{}-{key}", kind.name.replace('_', "-"))
}

#[async_trait]
impl Resource for Generic {
    type State<'a> = State;
    type PrivateState<'a> = ValueEmpty;
    type ProviderMetaState<'a> = ValueEmpty;

    fn schema(&self, _diags: &mut Diagnostics) -> Option<Schema> {
        let mut attributes: std::collections::HashMap<String, Attribute> = self
            .0
            .attrs
            .iter()
            .map(|a| (a.name.to_string(), attribute(a)))
            .collect();
        attributes.insert(
            "id".into(),
            Attribute {
                attr_type: AttributeType::String,
                constraint: AttributeConstraint::Computed,
                description: "id".into(),
                ..Default::default()
            },
        );
        attributes.insert(
            "tags".into(),
            Attribute {
                attr_type: AttributeType::Map(Box::new(AttributeType::String)),
                constraint: AttributeConstraint::Optional,
                description: "tags".into(),
                ..Default::default()
            },
        );
        Some(Schema {
            version: 0,
            block: Block {
                attributes,
                blocks: self
                    .0
                    .blocks
                    .iter()
                    .map(|(name, attrs)| (name.to_string(), block(attrs)))
                    .collect(),
                ..Default::default()
            },
        })
    }

    async fn read<'a>(
        &self,
        _diags: &mut Diagnostics,
        state: State,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(State, ValueEmpty)> {
        Some((state, private))
    }

    async fn plan_create<'a>(
        &self,
        _diags: &mut Diagnostics,
        mut proposed: State,
        _config: State,
        _meta: ValueEmpty,
    ) -> Option<(State, ValueEmpty)> {
        proposed.insert("id".into(), ValueAny::Unknown);
        Some((proposed, ValueEmpty::default()))
    }

    async fn plan_update<'a>(
        &self,
        _diags: &mut Diagnostics,
        prior: State,
        mut proposed: State,
        _config: State,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(State, ValueEmpty, Vec<AttributePath>)> {
        let replace: Vec<AttributePath> = self
            .0
            .attrs
            .iter()
            .filter(|a| a.replaces && prior.get(a.name) != proposed.get(a.name))
            .map(|a| AttributePath::new(a.name))
            .collect();
        let id = if replace.is_empty() {
            prior.get("id").cloned().unwrap_or_default()
        } else {
            ValueAny::Unknown
        };
        proposed.insert("id".into(), id);
        Some((proposed, private, replace))
    }

    async fn plan_destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior: State,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<ValueEmpty> {
        Some(private)
    }

    async fn create<'a>(
        &self,
        _diags: &mut Diagnostics,
        mut planned: State,
        _config: State,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(State, ValueEmpty)> {
        let id = id_for(self.0, &planned);
        planned.insert("id".into(), ValueAny::String(id));
        Some((planned, private))
    }

    async fn update<'a>(
        &self,
        _diags: &mut Diagnostics,
        _prior: State,
        planned: State,
        _config: State,
        private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<(State, ValueEmpty)> {
        Some((planned, private))
    }

    async fn destroy<'a>(
        &self,
        _diags: &mut Diagnostics,
        _state: State,
        _private: ValueEmpty,
        _meta: ValueEmpty,
    ) -> Option<()> {
        Some(())
    }
}
