//! Peak memory of the plan codec on a large plan: encodes a plan file (default 200 MiB) into
//! chunk files and decodes it back, streaming both ways, and prints the peak resident set size
//! (Linux `VmHWM`) of each phase.
//!
//! `cargo run --release -p benches --bin plan_peak_memory -- [MiB] [compressible|incompressible]`

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use tfops_core::plan::{
    Chunk, ChunkHeader, ChunkSink, ChunkSource, CodecConfig, PlanError, decode_to_writer,
    encode_reader,
};

/// Writes each chunk to `dir/<index>.json` + `dir/<index>.bin`, as a store would.
struct DirSink(PathBuf);

impl ChunkSink for DirSink {
    fn put(&mut self, chunk: Chunk) -> Result<(), PlanError> {
        let i = chunk.header.index;
        let header = serde_json::to_vec(&chunk.header).map_err(io::Error::other)?;
        fs::write(self.0.join(format!("{i}.json")), header)?;
        fs::write(self.0.join(format!("{i}.bin")), &chunk.data)?;
        Ok(())
    }
}

impl ChunkSource for DirSink {
    fn chunk(&mut self, index: u32) -> Result<Chunk, PlanError> {
        let header = fs::read(self.0.join(format!("{index}.json")))?;
        let header: ChunkHeader = serde_json::from_slice(&header).map_err(io::Error::other)?;
        let data = fs::read(self.0.join(format!("{index}.bin")))?;
        Ok(Chunk { header, data })
    }
}

/// Peak resident set size so far, in KiB.
fn peak_kib() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets the peak to the current resident size (Linux `clear_refs` 5).
fn reset_peak() {
    let _ = fs::write("/proc/self/clear_refs", "5");
}

fn write_plan(path: &Path, mib: usize, compressible: bool) -> io::Result<()> {
    let mut out = BufWriter::new(fs::File::create(path)?);
    for i in 0..mib {
        let block = if compressible {
            benches::plan_like_text(1 << 20)
        } else {
            benches::noise(1 << 20, i as u64 + 1)
        };
        out.write_all(&block)?;
    }
    out.flush()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    let compressible = args.next().as_deref() != Some("incompressible");
    let dir = tempfile::tempdir()?;
    let plan = dir.path().join("plan.bin");
    write_plan(&plan, mib, compressible)?;
    let chunks = dir.path().join("chunks");
    fs::create_dir(&chunks)?;
    let config = CodecConfig::default();

    reset_peak();
    let before = peak_kib();
    let (index, sink) = encode_reader(
        fs::File::open(&plan)?,
        config.clone(),
        "plan-main-0123456789",
        "upload-1",
        DirSink(chunks),
    )?;
    let encode_peak = peak_kib();

    reset_peak();
    let before_decode = peak_kib();
    let decoded = decode_to_writer(index.clone(), sink, &config, io::sink())?;
    let decode_peak = peak_kib();

    assert_eq!(decoded, (mib as u64) << 20);
    println!(
        "plan {mib} MiB ({}), stored {} bytes in {} chunks ({})",
        if compressible {
            "compressible"
        } else {
            "incompressible"
        },
        index.stored_size,
        index.chunks.len(),
        index.compression
    );
    println!(
        "encode: peak RSS {} MiB (process before: {} MiB)",
        encode_peak / 1024,
        before / 1024
    );
    println!(
        "decode: peak RSS {} MiB (process before: {} MiB)",
        decode_peak / 1024,
        before_decode / 1024
    );
    Ok(())
}
