//! Decoding: chunks in (in any order), the verified plan out.

use std::io::{self, BufReader, Read, Write};

use sha2::{Digest, Sha256};

use super::format::{Chunk, CodecConfig, Compression, PlanIndex};
use super::{PlanError, hex};

/// Gives the chunks of a plan by position.
pub trait ChunkSource {
    /// The chunk at `index`.
    ///
    /// # Errors
    /// [`PlanError::MissingChunk`] when there is none, or the store's error.
    fn chunk(&mut self, index: u32) -> Result<Chunk, PlanError>;
}

/// Chunks received in any order, checked against the index and put in order.
#[derive(Debug)]
pub struct OrderedChunks {
    chunks: Vec<Option<Chunk>>,
}

impl OrderedChunks {
    /// Orders `chunks` for `index`.
    ///
    /// # Errors
    /// [`PlanError::MixedPlanIds`], [`PlanError::StaleChunk`], [`PlanError::UnexpectedChunk`],
    /// [`PlanError::DuplicateChunk`] or [`PlanError::MissingChunk`]: the set is not exactly the
    /// chunks of this upload.
    pub fn new(
        index: &PlanIndex,
        chunks: impl IntoIterator<Item = Chunk>,
    ) -> Result<Self, PlanError> {
        let count = index.chunk_count();
        let mut slots: Vec<Option<Chunk>> = (0..count).map(|_| None).collect();
        for chunk in chunks {
            check_identity(index, &chunk, chunk.header.index)?;
            let position = chunk.header.index;
            let slot = slots
                .get_mut(position as usize)
                .ok_or(PlanError::UnexpectedChunk {
                    index: position,
                    count,
                })?;
            if slot.is_some() {
                return Err(PlanError::DuplicateChunk { index: position });
            }
            *slot = Some(chunk);
        }
        if let Some(missing) = slots.iter().position(Option::is_none) {
            return Err(PlanError::MissingChunk {
                index: u32::try_from(missing).unwrap_or(u32::MAX),
            });
        }
        Ok(Self { chunks: slots })
    }
}

impl ChunkSource for OrderedChunks {
    fn chunk(&mut self, index: u32) -> Result<Chunk, PlanError> {
        self.chunks
            .get_mut(index as usize)
            .and_then(Option::take)
            .ok_or(PlanError::MissingChunk { index })
    }
}

fn check_identity(index: &PlanIndex, chunk: &Chunk, position: u32) -> Result<(), PlanError> {
    if chunk.header.plan_id != index.plan_id {
        return Err(PlanError::MixedPlanIds {
            expected: index.plan_id.clone(),
            found: chunk.header.plan_id.clone(),
        });
    }
    if chunk.header.upload_id != index.upload_id {
        return Err(PlanError::StaleChunk {
            index: position,
            expected: index.upload_id.clone(),
            found: chunk.header.upload_id.clone(),
        });
    }
    Ok(())
}

/// Reads the stored bytes of every chunk in order, verifying each before releasing it.
struct ChunkReader<S> {
    source: S,
    index: PlanIndex,
    next: u32,
    current: Vec<u8>,
    pos: usize,
}

impl<S: ChunkSource> ChunkReader<S> {
    fn load_next(&mut self) -> Result<bool, PlanError> {
        let position = self.next;
        let Some(expected) = self.index.chunks.get(position as usize) else {
            return Ok(false);
        };
        let chunk = self.source.chunk(position)?;
        check_identity(&self.index, &chunk, position)?;
        let intact = chunk.header.index == position
            && chunk.data.len() as u64 == expected.size
            && crc32fast::hash(&chunk.data) == expected.crc32;
        if !intact {
            return Err(PlanError::ChunkCorrupt { index: position });
        }
        self.current = chunk.data;
        self.pos = 0;
        self.next += 1;
        Ok(true)
    }

    fn exhausted(&self) -> bool {
        self.next as usize == self.index.chunks.len() && self.pos == self.current.len()
    }
}

impl<S: ChunkSource> Read for ChunkReader<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.current.len() {
            if !self.load_next().map_err(PlanError::into_io)? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.current.len() - self.pos);
        buf[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

enum Inner<S: ChunkSource> {
    Raw(ChunkReader<S>),
    Zstd(zstd::stream::read::Decoder<'static, BufReader<ChunkReader<S>>>),
}

/// Reads a stored plan back. Every chunk is verified before its bytes are released, and the
/// end of the stream (`Ok(0)`) is only reported after the whole plan's size and SHA-256 match;
/// treat what was read as the plan only once that happened.
pub struct PlanDecoder<S: ChunkSource> {
    inner: Inner<S>,
    compression: Compression,
    hasher: Sha256,
    plain_len: u64,
    total_size: u64,
    sha256: String,
    verified: bool,
}

impl<S: ChunkSource> PlanDecoder<S> {
    /// A decoder for the plan `index` describes, reading chunks from `source`.
    ///
    /// # Errors
    /// What [`PlanIndex::check`] finds, before any chunk is read.
    pub fn new(index: PlanIndex, source: S, config: &CodecConfig) -> Result<Self, PlanError> {
        let compression = index.check(config)?;
        let total_size = index.total_size;
        let sha256 = index.sha256.clone();
        let reader = ChunkReader {
            source,
            index,
            next: 0,
            current: Vec::new(),
            pos: 0,
        };
        let inner = match compression {
            Compression::None => Inner::Raw(reader),
            Compression::Zstd => {
                Inner::Zstd(zstd::stream::read::Decoder::new(reader).map_err(|e| {
                    PlanError::CorruptStream {
                        compression: compression.as_str().into(),
                        message: e.to_string(),
                    }
                })?)
            }
        };
        Ok(Self {
            inner,
            compression,
            hasher: Sha256::new(),
            plain_len: 0,
            total_size,
            sha256,
            verified: false,
        })
    }

    fn read_verified(&mut self, buf: &mut [u8]) -> Result<usize, PlanError> {
        let read = match &mut self.inner {
            Inner::Raw(r) => r.read(buf),
            Inner::Zstd(d) => d.read(buf),
        };
        let n = read.map_err(|e| match PlanError::from_io(e) {
            PlanError::Io(e) if self.compression == Compression::Zstd => PlanError::CorruptStream {
                compression: self.compression.as_str().into(),
                message: e.to_string(),
            },
            other => other,
        })?;
        self.plain_len += n as u64;
        if self.plain_len > self.total_size {
            return Err(PlanError::SizeMismatch {
                expected: self.total_size,
                actual: self.plain_len,
            });
        }
        self.hasher.update(&buf[..n]);
        if n == 0 && !buf.is_empty() && !self.verified {
            self.verify_end()?;
        }
        Ok(n)
    }

    fn verify_end(&mut self) -> Result<(), PlanError> {
        let consumed = match &self.inner {
            Inner::Raw(r) => r.exhausted(),
            Inner::Zstd(d) => d.get_ref().get_ref().exhausted() && d.get_ref().buffer().is_empty(),
        };
        if !consumed {
            return Err(PlanError::CorruptStream {
                compression: self.compression.as_str().into(),
                message: "stored bytes continue after the end of the plan".into(),
            });
        }
        if self.plain_len != self.total_size {
            return Err(PlanError::SizeMismatch {
                expected: self.total_size,
                actual: self.plain_len,
            });
        }
        let actual = hex(&std::mem::take(&mut self.hasher).finalize());
        if actual != self.sha256 {
            return Err(PlanError::HashMismatch {
                expected: self.sha256.clone(),
                actual,
            });
        }
        self.verified = true;
        Ok(())
    }
}

impl<S: ChunkSource> Read for PlanDecoder<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_verified(buf).map_err(PlanError::into_io)
    }
}

/// Decodes the plan into `writer`; returns its size. `writer` may have received bytes when
/// this fails: write to a temporary file and use it only on `Ok`.
///
/// # Errors
/// Any [`PlanError`]; never `Ok` for a plan that differs from the one encoded.
pub fn decode_to_writer<S: ChunkSource, W: Write>(
    index: PlanIndex,
    source: S,
    config: &CodecConfig,
    mut writer: W,
) -> Result<u64, PlanError> {
    let mut decoder = PlanDecoder::new(index, source, config)?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = decoder.read_verified(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        writer.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// Decodes the plan into memory.
///
/// # Errors
/// Any [`PlanError`]; never `Ok` for a plan that differs from the one encoded.
pub fn decode_to_vec<S: ChunkSource>(
    index: PlanIndex,
    source: S,
    config: &CodecConfig,
) -> Result<Vec<u8>, PlanError> {
    let capacity = usize::try_from(index.total_size.min(config.max_plan_size)).unwrap_or(0);
    let mut out = Vec::with_capacity(capacity);
    // Straight into the vector's spare room: no intermediate buffer.
    PlanDecoder::new(index, source, config)?
        .read_to_end(&mut out)
        .map_err(PlanError::from_io)?;
    Ok(out)
}
