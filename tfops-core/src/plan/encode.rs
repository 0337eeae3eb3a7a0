//! Encoding: plan bytes in, chunks out, as they fill up.

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

use super::format::{
    Chunk, ChunkHeader, ChunkRef, CodecConfig, Compression, CompressionPolicy, FORMAT_VERSION,
    PlanIndex,
};
use super::{PlanError, hex};

/// Receives chunks as the encoder produces them, in order.
pub trait ChunkSink {
    /// Takes one chunk.
    ///
    /// # Errors
    /// Whatever storing it failed with; encoding stops.
    fn put(&mut self, chunk: Chunk) -> Result<(), PlanError>;
}

impl ChunkSink for Vec<Chunk> {
    fn put(&mut self, chunk: Chunk) -> Result<(), PlanError> {
        self.push(chunk);
        Ok(())
    }
}

impl<S: ChunkSink + ?Sized> ChunkSink for &mut S {
    fn put(&mut self, chunk: Chunk) -> Result<(), PlanError> {
        (**self).put(chunk)
    }
}

/// Cuts stored bytes into chunks and hands them to the sink.
struct Chunker<S> {
    sink: S,
    buf: Vec<u8>,
    chunk_size: usize,
    text: bool,
    plan_id: String,
    upload_id: String,
    refs: Vec<ChunkRef>,
    stored: u64,
}

impl<S: ChunkSink> Chunker<S> {
    fn emit(&mut self, keep_tail: bool) -> Result<(), PlanError> {
        let mut cut = self.buf.len();
        if self.text {
            match std::str::from_utf8(&self.buf) {
                Ok(_) => {}
                // A character cut by the chunk boundary moves to the next chunk.
                Err(e) if keep_tail && e.error_len().is_none() => cut = e.valid_up_to(),
                Err(_) => return Err(PlanError::NotText),
            }
        }
        if cut == 0 {
            return Ok(());
        }
        let tail = self.buf.split_off(cut);
        let data = std::mem::replace(&mut self.buf, tail);
        self.buf.reserve(self.chunk_size);
        let crc32 = crc32fast::hash(&data);
        let size = data.len() as u64;
        let header = ChunkHeader {
            format: FORMAT_VERSION,
            plan_id: self.plan_id.clone(),
            upload_id: self.upload_id.clone(),
            index: u32::try_from(self.refs.len()).map_err(|_| PlanError::TooLarge {
                size: self.stored,
                limit: u64::from(u32::MAX),
            })?,
            size,
            crc32,
        };
        self.sink.put(Chunk { header, data })?;
        self.refs.push(ChunkRef { size, crc32 });
        self.stored += size;
        Ok(())
    }

    fn push(&mut self, mut data: &[u8]) -> Result<(), PlanError> {
        while !data.is_empty() {
            let room = self.chunk_size.saturating_sub(self.buf.len()).max(1);
            let take = room.min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buf.len() >= self.chunk_size {
                self.emit(true)?;
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(S, Vec<ChunkRef>, u64), PlanError> {
        self.emit(false)?;
        Ok((self.sink, self.refs, self.stored))
    }
}

impl<S: ChunkSink> Write for Chunker<S> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.push(data).map_err(PlanError::into_io)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum State<S: ChunkSink> {
    Sampling {
        sample: Vec<u8>,
        chunker: Chunker<S>,
    },
    Raw(Chunker<S>),
    Zstd(zstd::stream::write::Encoder<'static, Chunker<S>>),
    Failed,
}

/// Encodes one plan: write its bytes, then [`PlanEncoder::finish`] for the index.
pub struct PlanEncoder<S: ChunkSink> {
    config: CodecConfig,
    plan_id: String,
    upload_id: String,
    hasher: Sha256,
    plain_len: u64,
    state: State<S>,
}

impl<S: ChunkSink> PlanEncoder<S> {
    /// An encoder for plan `plan_id`, upload `upload_id` (unique per upload, e.g. random or
    /// derived from the writer's identity and time), sending chunks to `sink`.
    pub fn new(config: CodecConfig, plan_id: &str, upload_id: &str, sink: S) -> Self {
        let chunker = Chunker {
            sink,
            buf: Vec::with_capacity(config.chunk_size.min(1 << 20)),
            chunk_size: config.chunk_size.max(1),
            text: config.text,
            plan_id: plan_id.to_string(),
            upload_id: upload_id.to_string(),
            refs: Vec::new(),
            stored: 0,
        };
        let state = if config.text || config.policy == CompressionPolicy::Never {
            State::Raw(chunker)
        } else {
            State::Sampling {
                sample: Vec::new(),
                chunker,
            }
        };
        Self {
            config,
            plan_id: plan_id.to_string(),
            upload_id: upload_id.to_string(),
            hasher: Sha256::new(),
            plain_len: 0,
            state,
        }
    }

    /// Whether the sample shrinks enough, judged at the fast level (a strong level spends its
    /// time in vain on incompressible data).
    fn worth_compressing(&self, sample: &[u8]) -> Result<bool, PlanError> {
        if self.config.policy == CompressionPolicy::Always {
            return Ok(true);
        }
        if sample.is_empty() {
            return Ok(false);
        }
        let trial = zstd::bulk::compress(sample, self.config.large_level)?;
        Ok((trial.len() as f64) < (sample.len() as f64) * self.config.min_gain)
    }

    /// The sample is full: choose how to store the rest of the stream.
    fn choose_streaming(&mut self) -> Result<(), PlanError> {
        let State::Sampling { sample, chunker } = std::mem::replace(&mut self.state, State::Failed)
        else {
            return Ok(());
        };
        let compress = self.worth_compressing(&sample)?;
        self.state = if compress {
            let mut encoder = zstd::stream::write::Encoder::new(chunker, self.config.large_level)?;
            encoder.include_checksum(false)?;
            encoder.write_all(&sample).map_err(PlanError::from_io)?;
            State::Zstd(encoder)
        } else {
            let mut chunker = chunker;
            chunker.push(&sample)?;
            State::Raw(chunker)
        };
        Ok(())
    }

    fn push(&mut self, data: &[u8]) -> Result<(), PlanError> {
        self.plain_len += data.len() as u64;
        if self.plain_len > self.config.max_plan_size {
            self.state = State::Failed;
            return Err(PlanError::TooLarge {
                size: self.plain_len,
                limit: self.config.max_plan_size,
            });
        }
        self.hasher.update(data);
        match &mut self.state {
            State::Sampling { sample, .. } => {
                sample.extend_from_slice(data);
                if sample.len() > self.config.sample_size {
                    self.choose_streaming()?;
                }
                Ok(())
            }
            State::Raw(chunker) => chunker.push(data),
            State::Zstd(encoder) => encoder.write_all(data).map_err(PlanError::from_io),
            State::Failed => Err(PlanError::Io(io::Error::other("encoder failed earlier"))),
        }
    }

    /// Ends the plan: flushes the last chunk and returns the index (to be written after every
    /// chunk) and the sink.
    ///
    /// # Errors
    /// A [`PlanError`] from compression, the sink, or an earlier write.
    pub fn finish(mut self) -> Result<(PlanIndex, S), PlanError> {
        let (chunker, compression) = match std::mem::replace(&mut self.state, State::Failed) {
            State::Sampling {
                sample,
                mut chunker,
            } => {
                if self.worth_compressing(&sample)? {
                    let compressed = zstd::bulk::compress(&sample, self.config.small_level)?;
                    chunker.push(&compressed)?;
                    (chunker, Compression::Zstd)
                } else {
                    chunker.push(&sample)?;
                    (chunker, Compression::None)
                }
            }
            State::Raw(chunker) => (chunker, Compression::None),
            State::Zstd(encoder) => (
                encoder.finish().map_err(PlanError::from_io)?,
                Compression::Zstd,
            ),
            State::Failed => return Err(PlanError::Io(io::Error::other("encoder failed earlier"))),
        };
        let (sink, chunks, stored_size) = chunker.finish()?;
        let index = PlanIndex {
            format: super::FORMAT_VERSION,
            plan_id: self.plan_id,
            upload_id: self.upload_id,
            total_size: self.plain_len,
            sha256: hex(&self.hasher.finalize()),
            compression: compression.as_str().to_string(),
            stored_size,
            chunks,
        };
        Ok((index, sink))
    }
}

impl<S: ChunkSink> Write for PlanEncoder<S> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.push(data).map_err(PlanError::into_io)?;
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Encodes everything `reader` yields.
///
/// # Errors
/// A [`PlanError`] from reading, compression or the sink.
pub fn encode_reader<R: Read, S: ChunkSink>(
    mut reader: R,
    config: CodecConfig,
    plan_id: &str,
    upload_id: &str,
    sink: S,
) -> Result<(PlanIndex, S), PlanError> {
    let mut encoder = PlanEncoder::new(config, plan_id, upload_id, sink);
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(PlanError::Io(e)),
        };
        encoder.push(&buf[..n])?;
    }
    encoder.finish()
}
