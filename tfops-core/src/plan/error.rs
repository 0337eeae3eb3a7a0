use std::io;

/// Why a plan could not be encoded or decoded. Decoding never returns a wrong plan: any
/// inconsistency is one of these.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A chunk the index lists is not there.
    #[error("chunk {index} of the plan is missing")]
    MissingChunk {
        /// Its position.
        index: u32,
    },
    /// Two chunks claim the same position.
    #[error("chunk {index} of the plan is present twice")]
    DuplicateChunk {
        /// The position.
        index: u32,
    },
    /// A chunk claims a position past the end of the set.
    #[error("chunk {index} is outside the plan's {count} chunks")]
    UnexpectedChunk {
        /// The position claimed.
        index: u32,
        /// How many chunks the index lists.
        count: u32,
    },
    /// A chunk belongs to another plan.
    #[error("chunk of plan {found} found among the chunks of plan {expected}")]
    MixedPlanIds {
        /// The plan the index describes.
        expected: String,
        /// The plan the chunk belongs to.
        found: String,
    },
    /// A chunk belongs to another upload of the same plan id (a replacement in progress, or
    /// leftovers of an old one).
    #[error("chunk {index} belongs to upload {found}, not {expected}")]
    StaleChunk {
        /// Its position.
        index: u32,
        /// The upload the index describes.
        expected: String,
        /// The upload the chunk belongs to.
        found: String,
    },
    /// A chunk's bytes do not match its recorded size or SHA-256.
    #[error("chunk {index} is damaged (size or SHA-256 differs from the index)")]
    ChunkCorrupt {
        /// Its position.
        index: u32,
    },
    /// The decoded plan has another size than recorded.
    #[error("decoded plan has {actual} bytes, the index says {expected}")]
    SizeMismatch {
        /// Recorded size.
        expected: u64,
        /// Decoded size so far.
        actual: u64,
    },
    /// The decoded plan's SHA-256 differs from the recorded one.
    #[error("decoded plan's SHA-256 {actual} differs from the recorded {expected}")]
    HashMismatch {
        /// Recorded hash.
        expected: String,
        /// Decoded hash.
        actual: String,
    },
    /// The compressed stream could not be decompressed.
    #[error("the stored plan is not a valid {compression} stream: {message}")]
    CorruptStream {
        /// The compression recorded.
        compression: String,
        /// The decompressor's complaint.
        message: String,
    },
    /// The plan exceeds the configured limit.
    #[error("plan of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The size (so far, when encoding).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The stored form was written by a newer tfops.
    #[error("stored plan has format {found}; this tfops reads formats up to {supported}")]
    UnsupportedFormat {
        /// The format found.
        found: u32,
        /// The newest format this version reads.
        supported: u32,
    },
    /// The index names a compression this version does not know.
    #[error("stored plan uses unknown compression {0:?}")]
    UnknownCompression(String),
    /// The index is inconsistent (chunk list and count disagree, bad fields).
    #[error("invalid plan index: {0}")]
    InvalidIndex(String),
    /// A readable plan is not UTF-8 text.
    #[error("readable plan is not UTF-8 text")]
    NotText,
    /// Reading the plan or writing chunks failed.
    #[error("I/O error while encoding or decoding a plan")]
    Io(#[from] io::Error),
}

impl PlanError {
    /// Wraps the error for the `io::Read`/`io::Write` boundary.
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            PlanError::Io(e) => e,
            other => io::Error::other(other),
        }
    }

    /// Recovers a `PlanError` that crossed an `io` boundary.
    pub(crate) fn from_io(e: io::Error) -> Self {
        if e.get_ref().is_some_and(|inner| inner.is::<PlanError>()) {
            match e.into_inner().map(|inner| inner.downcast::<PlanError>()) {
                Some(Ok(plan)) => *plan,
                Some(Err(other)) => PlanError::Io(io::Error::other(other)),
                None => PlanError::Io(io::Error::other("unknown I/O error")),
            }
        } else {
            PlanError::Io(e)
        }
    }
}
