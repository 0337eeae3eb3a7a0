//! The resource types the stand-in provider plans, with the attribute names of the real AWS
//! provider that the starter policies read. Only the shape matters: nothing is created anywhere.

use tf_provider::schema::{Attribute, AttributeConstraint, AttributeType, NestedBlock};

/// One attribute of a resource type.
pub struct Attr {
    /// Its name, as in the real provider.
    pub name: &'static str,
    /// Its type.
    pub ty: fn() -> AttributeType,
    /// Whether the practitioner must set it.
    pub required: bool,
    /// Whether a change replaces the resource (as it does in the real provider).
    pub replaces: bool,
}

/// One resource type: its name without the `aws_` prefix, attributes and nested list blocks.
pub struct Kind {
    /// `db_instance` for `aws_db_instance`.
    pub name: &'static str,
    /// The attributes besides `id` and `tags`.
    pub attrs: &'static [Attr],
    /// Nested list blocks (`ingress { ... }`), each with optional attributes.
    pub blocks: &'static [(&'static str, &'static [Attr])],
}

fn string() -> AttributeType {
    AttributeType::String
}
fn number() -> AttributeType {
    AttributeType::Number
}
fn boolean() -> AttributeType {
    AttributeType::Bool
}
fn strings() -> AttributeType {
    AttributeType::List(Box::new(AttributeType::String))
}

const fn req(name: &'static str, replaces: bool) -> Attr {
    Attr {
        name,
        ty: string,
        required: true,
        replaces,
    }
}
const fn opt(name: &'static str, ty: fn() -> AttributeType) -> Attr {
    Attr {
        name,
        ty,
        required: false,
        replaces: false,
    }
}

const RULE: &[Attr] = &[
    opt("from_port", number),
    opt("to_port", number),
    opt("protocol", string),
    opt("cidr_blocks", strings),
    opt("ipv6_cidr_blocks", strings),
    opt("description", string),
];

/// Every resource type served.
pub const KINDS: &[Kind] = &[
    Kind {
        name: "db_instance",
        attrs: &[
            req("identifier", true),
            req("engine", true),
            req("instance_class", false),
            opt("allocated_storage", number),
            opt("deletion_protection", boolean),
        ],
        blocks: &[],
    },
    Kind {
        name: "rds_cluster",
        attrs: &[req("cluster_identifier", true), req("engine", true)],
        blocks: &[],
    },
    Kind {
        name: "dynamodb_table",
        attrs: &[
            req("name", true),
            req("hash_key", true),
            opt("billing_mode", string),
        ],
        blocks: &[],
    },
    Kind {
        name: "s3_bucket",
        attrs: &[req("bucket", true), opt("force_destroy", boolean)],
        blocks: &[],
    },
    Kind {
        name: "ebs_volume",
        attrs: &[req("availability_zone", true), opt("size", number)],
        blocks: &[],
    },
    Kind {
        name: "instance",
        attrs: &[req("ami", true), req("instance_type", false)],
        blocks: &[],
    },
    Kind {
        name: "security_group",
        attrs: &[req("name", true), opt("description", string)],
        blocks: &[("ingress", RULE), ("egress", RULE)],
    },
    Kind {
        name: "vpc_security_group_ingress_rule",
        attrs: &[
            req("security_group_id", true),
            opt("cidr_ipv4", string),
            opt("cidr_ipv6", string),
            opt("from_port", number),
            opt("to_port", number),
            req("ip_protocol", false),
        ],
        blocks: &[],
    },
];

/// The schema attribute for `a`.
pub fn attribute(a: &Attr) -> Attribute {
    Attribute {
        attr_type: (a.ty)(),
        constraint: if a.required {
            AttributeConstraint::Required
        } else {
            AttributeConstraint::Optional
        },
        description: a.name.into(),
        ..Default::default()
    }
}

/// The nested list block for `attrs`.
pub fn block(attrs: &[Attr]) -> NestedBlock {
    NestedBlock::List(tf_provider::schema::Block {
        attributes: attrs
            .iter()
            .map(|a| (a.name.to_string(), attribute(a)))
            .collect(),
        ..Default::default()
    })
}
