//! Plans stored in Kubernetes objects: the chunked plan codec.
//!
//! A binary plan (`terraform plan -out`) must survive being stored in Secrets, which hold at
//! most 1 MiB of data each, and come back byte-identical or not at all. The codec is pure and
//! streaming: [`PlanEncoder`] is a [`std::io::Write`] that turns plan bytes into [`Chunk`]s
//! handed to a [`ChunkSink`] as they fill up, and ends with a [`PlanIndex`] describing the set;
//! [`PlanDecoder`] is a [`std::io::Read`] that pulls chunks from a [`ChunkSource`], verifies
//! each one (size and CRC-32) before releasing a byte of it, and fails at the end unless size and SHA-256 of the
//! whole plan match. Neither holds more than a chunk (plus the compressor's window) in memory.
//!
//! **Compression** is chosen per plan and recorded in the index: the first
//! [`CodecConfig::sample_size`] bytes are tried with zstd, and the plan is stored as is when
//! they do not shrink (incompressible data costs no compression time). A plan that fits in the
//! sample is compressed at a strong zstd level (13: cheap at that size, and smaller than gzip
//! on Terraform's zip-based plan files); a larger one is streamed at a fast level (3).
//!
//! **Replacing a plan atomically** (what a store must do): write every chunk of the new upload
//! under names that include its upload id, then write the index, then delete the old chunks. A
//! reader follows the index it read; chunks of another upload, another plan, or damaged ones
//! are refused by their header and checksum ([`PlanError::StaleChunk`],
//! [`PlanError::MixedPlanIds`], [`PlanError::ChunkCorrupt`]), so a reader never assembles half
//! of an old plan with half of a new one.
//!
//! **Readable plans** (`terraform show` text and JSON) use the same codec with
//! [`CodecConfig::readable`]: no compression and chunks cut on UTF-8 boundaries, so every chunk
//! is text that fits a ConfigMap and stays readable with `kubectl`.
//!
//! The stored form is versioned ([`FORMAT_VERSION`]); a decoder refuses a newer format with a
//! clear error instead of guessing.

mod content;
mod decode;
mod encode;
mod error;
mod format;

pub use content::{PlanJsonError, actions, content_digest};
pub use decode::{ChunkSource, OrderedChunks, PlanDecoder, decode_to_vec, decode_to_writer};
pub use encode::{ChunkSink, PlanEncoder, encode_reader};
pub use error::PlanError;
pub use format::{
    Chunk, ChunkHeader, ChunkRef, CodecConfig, Compression, CompressionPolicy, DEFAULT_CHUNK_SIZE,
    FORMAT_VERSION, PlanIndex, SECRET_DATA_LIMIT,
};

pub(crate) use crate::digest::hex;
