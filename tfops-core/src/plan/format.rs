//! The stored form: chunk headers and the index. Serialized as JSON by stores; unknown fields
//! are ignored so a newer tfops can add some, and [`FORMAT_VERSION`] guards real changes.

use serde::{Deserialize, Serialize};

use super::PlanError;

/// The newest stored format this version writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The most data a Kubernetes Secret (or ConfigMap) holds, all keys together.
pub const SECRET_DATA_LIMIT: usize = 1_048_576;
/// Chunk payload size: a Secret's limit less 16 KiB for the chunk header key and other keys.
pub const DEFAULT_CHUNK_SIZE: usize = SECRET_DATA_LIMIT - 16 * 1024;

/// How the stored bytes are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored as is.
    None,
    /// One zstd frame over the whole plan.
    Zstd,
}

impl Compression {
    /// The name recorded in the index.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
        }
    }

    /// Reads a recorded name.
    ///
    /// # Errors
    /// [`PlanError::UnknownCompression`] for a name this version does not know.
    pub fn parse(name: &str) -> Result<Self, PlanError> {
        match name {
            "none" => Ok(Compression::None),
            "zstd" => Ok(Compression::Zstd),
            other => Err(PlanError::UnknownCompression(other.to_string())),
        }
    }
}

/// When to compress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionPolicy {
    /// Compress when a sample shrinks (the default).
    Auto,
    /// Never compress.
    Never,
    /// Always compress.
    Always,
}

/// Encoding settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CodecConfig {
    /// Stored bytes per chunk (at most [`SECRET_DATA_LIMIT`]).
    pub chunk_size: usize,
    /// The largest plan accepted, in bytes, when encoding and decoding.
    pub max_plan_size: u64,
    /// When to compress.
    pub policy: CompressionPolicy,
    /// How many leading bytes are tried before choosing; a plan that fits is compressed in one
    /// piece at [`CodecConfig::small_level`].
    pub sample_size: usize,
    /// zstd level for plans that fit in the sample.
    pub small_level: i32,
    /// zstd level for larger plans, streamed.
    pub large_level: i32,
    /// Compress only when the sample shrinks below this fraction of its size.
    pub min_gain: f64,
    /// Cut chunks on UTF-8 boundaries and require text (readable plans for ConfigMaps).
    pub text: bool,
}

impl Default for CodecConfig {
    fn default() -> Self {
        Self {
            chunk_size: DEFAULT_CHUNK_SIZE,
            max_plan_size: 1 << 30,
            policy: CompressionPolicy::Auto,
            sample_size: 1 << 20,
            small_level: 13,
            large_level: 3,
            min_gain: 0.95,
            text: false,
        }
    }
}

impl CodecConfig {
    /// Settings for readable plans: text chunks, no compression.
    pub fn readable() -> Self {
        Self {
            policy: CompressionPolicy::Never,
            text: true,
            ..Self::default()
        }
    }
}

/// What each chunk carries about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChunkHeader {
    /// The stored format.
    pub format: u32,
    /// The plan id.
    pub plan_id: String,
    /// The upload this chunk belongs to.
    pub upload_id: String,
    /// Its position, from 0.
    pub index: u32,
    /// Its size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE) of its bytes: catches a damaged chunk before any of it is used. The
    /// plan's SHA-256 in the index is what vouches for the whole plan.
    pub crc32: u32,
}

/// One piece of a stored plan: what a Secret (or ConfigMap) holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// What it is.
    pub header: ChunkHeader,
    /// Its stored bytes.
    pub data: Vec<u8>,
}

/// Size and checksum of one chunk, as listed in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChunkRef {
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 (IEEE).
    pub crc32: u32,
}

/// Describes a stored plan; written last, read first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanIndex {
    /// The stored format.
    pub format: u32,
    /// The plan id.
    pub plan_id: String,
    /// This upload's id (chunks of other uploads are refused).
    pub upload_id: String,
    /// Size of the plan, in bytes.
    pub total_size: u64,
    /// SHA-256 of the plan, hex.
    pub sha256: String,
    /// `none` or `zstd`.
    pub compression: String,
    /// Stored bytes, all chunks together.
    pub stored_size: u64,
    /// The chunks, in order.
    pub chunks: Vec<ChunkRef>,
}

impl PlanIndex {
    /// How many chunks the plan has.
    pub fn chunk_count(&self) -> u32 {
        u32::try_from(self.chunks.len()).unwrap_or(u32::MAX)
    }

    /// Checks what can be checked before reading any chunk.
    ///
    /// # Errors
    /// [`PlanError::UnsupportedFormat`], [`PlanError::UnknownCompression`],
    /// [`PlanError::TooLarge`] or [`PlanError::InvalidIndex`].
    pub fn check(&self, config: &CodecConfig) -> Result<Compression, PlanError> {
        if self.format > FORMAT_VERSION || self.format == 0 {
            return Err(PlanError::UnsupportedFormat {
                found: self.format,
                supported: FORMAT_VERSION,
            });
        }
        let compression = Compression::parse(&self.compression)?;
        if self.total_size > config.max_plan_size {
            return Err(PlanError::TooLarge {
                size: self.total_size,
                limit: config.max_plan_size,
            });
        }
        let stored: u64 = self.chunks.iter().map(|c| c.size).sum();
        if stored != self.stored_size {
            return Err(PlanError::InvalidIndex(format!(
                "chunks add up to {stored} bytes, storedSize says {}",
                self.stored_size
            )));
        }
        if compression == Compression::None && stored != self.total_size {
            return Err(PlanError::InvalidIndex(
                "an uncompressed plan must store exactly its size".into(),
            ));
        }
        if self.sha256.len() != 64 {
            return Err(PlanError::InvalidIndex(
                "sha256 must be 64 hex digits".into(),
            ));
        }
        Ok(compression)
    }
}
