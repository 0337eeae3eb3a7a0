//! The plan codec: round trips, the stored form, and every way a stored plan can be damaged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use proptest::prelude::*;
use tfops_core::plan::{
    Chunk, CodecConfig, CompressionPolicy, OrderedChunks, PlanEncoder, PlanError, PlanIndex,
    SECRET_DATA_LIMIT, decode_to_vec, encode_reader,
};

const REAL_PLAN: &[u8] = include_bytes!("fixtures/terraform-300-resources.tfplan");

fn small(chunk_size: usize) -> CodecConfig {
    CodecConfig {
        chunk_size,
        sample_size: 4096,
        ..CodecConfig::default()
    }
}

fn encode(data: &[u8], config: &CodecConfig) -> (PlanIndex, Vec<Chunk>) {
    encode_reader(
        data,
        config.clone(),
        "plan-main-0123456789",
        "u1",
        Vec::new(),
    )
    .unwrap()
}

fn decode(
    index: &PlanIndex,
    chunks: Vec<Chunk>,
    config: &CodecConfig,
) -> Result<Vec<u8>, PlanError> {
    let ordered = OrderedChunks::new(index, chunks)?;
    decode_to_vec(index.clone(), ordered, config)
}

/// Deterministic incompressible bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn text(len: usize) -> Vec<u8> {
    let line = "  # terraform_data.r42 will be created — ✓ input = { name = \"résumé\" }\n";
    let mut bytes: Vec<u8> = line.bytes().cycle().take(len).collect();
    // Exactly `len` bytes of valid UTF-8: a character cut at the end becomes spaces.
    let valid = std::str::from_utf8(&bytes).map_or_else(|e| e.valid_up_to(), str::len);
    bytes[valid..].fill(b' ');
    bytes
}

#[test]
fn round_trips_at_the_chunk_boundaries() {
    let config = small(1000);
    for len in [0, 1, 999, 1000, 1001, 2000, 2001, 10_000] {
        for data in [noise(len, 7), text(len)] {
            let (index, chunks) = encode(&data, &config);
            assert_eq!(index.total_size, len as u64);
            assert!(chunks.iter().all(|c| c.data.len() <= 1000));
            assert_eq!(decode(&index, chunks, &config).unwrap(), data, "len {len}");
        }
    }
}

#[test]
fn incompressible_plans_are_stored_as_is_and_compressible_ones_compressed() {
    let config = small(1 << 20);
    let (index, _) = encode(&noise(100_000, 3), &config);
    assert_eq!(index.compression, "none");
    assert_eq!(index.stored_size, 100_000);
    let (index, _) = encode(&text(100_000), &config);
    assert_eq!(index.compression, "zstd");
    assert!(index.stored_size < 10_000, "{}", index.stored_size);
    let never = CodecConfig {
        policy: CompressionPolicy::Never,
        ..config
    };
    assert_eq!(encode(&text(100_000), &never).0.compression, "none");
}

#[test]
fn a_real_terraform_plan_round_trips_smaller_than_gzip() {
    let config = CodecConfig::default();
    let (index, chunks) = encode(REAL_PLAN, &config);
    assert_eq!(index.compression, "zstd");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(REAL_PLAN).unwrap();
    let gzip_size = gz.finish().unwrap().len() as u64;
    assert!(
        index.stored_size < gzip_size,
        "stored {} vs gzip {gzip_size}",
        index.stored_size
    );
    assert_eq!(decode(&index, chunks, &config).unwrap(), REAL_PLAN);
}

#[test]
fn every_chunk_fits_a_secret_with_its_header() {
    let config = CodecConfig::default();
    let data = noise(3 * SECRET_DATA_LIMIT + 17, 11);
    let (index, chunks) = encode(&data, &config);
    assert_eq!(chunks.len(), 4);
    for c in &chunks {
        let header = serde_json::to_vec(&c.header).unwrap();
        assert!(c.data.len() + header.len() < SECRET_DATA_LIMIT);
    }
    let index_json = serde_json::to_vec(&index).unwrap();
    assert!(
        index_json.len() < 4096,
        "the index is small: {}",
        index_json.len()
    );
}

#[test]
fn chunks_decode_in_any_order() {
    let config = small(500);
    let data = noise(5000, 5);
    let (index, mut chunks) = encode(&data, &config);
    chunks.reverse();
    chunks.swap(1, 4);
    assert_eq!(decode(&index, chunks, &config).unwrap(), data);
}

#[test]
fn a_broken_set_is_refused_with_what_is_wrong() {
    let config = small(500);
    let data = noise(3000, 9);
    let (index, chunks) = encode(&data, &config);

    let mut missing = chunks.clone();
    missing.remove(2);
    assert!(matches!(
        decode(&index, missing, &config),
        Err(PlanError::MissingChunk { index: 2 })
    ));

    let mut dup = chunks.clone();
    dup.push(chunks[1].clone());
    assert!(matches!(
        decode(&index, dup, &config),
        Err(PlanError::DuplicateChunk { index: 1 })
    ));

    let mut mixed = chunks.clone();
    mixed[0].header.plan_id = "plan-main-9999999999".into();
    assert!(matches!(
        decode(&index, mixed, &config),
        Err(PlanError::MixedPlanIds { .. })
    ));

    let mut flipped = chunks.clone();
    flipped[3].data[10] ^= 1;
    assert!(matches!(
        decode(&index, flipped, &config),
        Err(PlanError::ChunkCorrupt { index: 3 })
    ));

    let mut extra = chunks.clone();
    let mut stray = chunks[0].clone();
    stray.header.index = 99;
    extra.push(stray);
    assert!(matches!(
        decode(&index, extra, &config),
        Err(PlanError::UnexpectedChunk { index: 99, .. })
    ));

    let mut wrong_hash = index.clone();
    wrong_hash.sha256 = "0".repeat(64);
    assert!(matches!(
        decode(&wrong_hash, chunks.clone(), &config),
        Err(PlanError::HashMismatch { .. })
    ));
}

#[test]
fn a_reader_never_mixes_an_old_upload_with_a_new_one() {
    let config = small(500);
    let old = noise(2000, 1);
    let new = noise(2000, 2);
    let (old_index, old_chunks) = encode_reader(
        &old[..],
        config.clone(),
        "plan-main-0123456789",
        "upload-a",
        Vec::new(),
    )
    .unwrap();
    let (_, new_chunks) = encode_reader(
        &new[..],
        config.clone(),
        "plan-main-0123456789",
        "upload-b",
        Vec::new(),
    )
    .unwrap();
    // A replacement in progress: some chunks already rewritten, the index not yet.
    let mut half: Vec<Chunk> = new_chunks[..2].to_vec();
    half.extend_from_slice(&old_chunks[2..]);
    let err = decode(&old_index, half, &config).unwrap_err();
    assert!(
        matches!(err, PlanError::StaleChunk { index: 0, .. }),
        "{err}"
    );
    assert_eq!(decode(&old_index, old_chunks, &config).unwrap(), old);
}

#[test]
fn size_limits_are_enforced_both_ways() {
    let config = CodecConfig {
        max_plan_size: 1000,
        ..small(500)
    };
    let err = encode_reader(&noise(1001, 1)[..], config.clone(), "p", "u", Vec::new()).unwrap_err();
    assert!(matches!(err, PlanError::TooLarge { limit: 1000, .. }));
    let (index, chunks) = encode(&noise(2000, 1), &small(500));
    assert!(matches!(
        decode(&index, chunks, &config),
        Err(PlanError::TooLarge { .. })
    ));
}

#[test]
fn a_compression_bomb_stops_at_the_recorded_size() {
    let config = small(1 << 20);
    let (mut index, chunks) = encode(&vec![0u8; 1_000_000], &config);
    assert_eq!(index.compression, "zstd");
    index.total_size = 1000; // a lie: the stream inflates far beyond it
    let err = decode(&index, chunks, &config).unwrap_err();
    assert!(
        matches!(err, PlanError::SizeMismatch { expected: 1000, .. }),
        "{err}"
    );
}

#[test]
fn newer_formats_and_unknown_compressions_are_refused_clearly() {
    let config = small(500);
    let (index, chunks) = encode(&noise(100, 1), &config);
    let newer = PlanIndex {
        format: 2,
        ..index.clone()
    };
    let err = decode(&newer, chunks.clone(), &config).unwrap_err();
    assert_eq!(
        err.to_string(),
        "stored plan has format 2; this tfops reads formats up to 1"
    );
    let brotli = PlanIndex {
        compression: "brotli".into(),
        ..index.clone()
    };
    assert!(matches!(
        decode(&brotli, chunks, &config),
        Err(PlanError::UnknownCompression(_))
    ));
    // The index reads back from JSON with fields a newer version may add.
    let mut json = serde_json::to_value(&index).unwrap();
    json["addedLater"] = serde_json::json!(true);
    assert_eq!(serde_json::from_value::<PlanIndex>(json).unwrap(), index);
}

#[test]
fn readable_plans_are_text_chunks() {
    let config = CodecConfig {
        chunk_size: 100,
        ..CodecConfig::readable()
    };
    let data = text(5000);
    let (index, chunks) = encode(&data, &config);
    assert_eq!(index.compression, "none");
    assert!(chunks.len() > 40);
    for c in &chunks {
        assert!(
            std::str::from_utf8(&c.data).is_ok(),
            "chunk {} cuts a character",
            c.header.index
        );
        assert!(c.data.len() <= 100);
    }
    assert_eq!(decode(&index, chunks, &config).unwrap(), data);
    let err = encode_reader(&[0xffu8, 0xfe][..], config, "p", "u", Vec::new()).unwrap_err();
    assert!(matches!(err, PlanError::NotText));
}

#[test]
fn the_encoder_streams_through_write() {
    let config = small(1000);
    let data = text(50_000);
    let mut enc = PlanEncoder::new(config.clone(), "plan-main-0123456789", "u", Vec::new());
    for piece in data.chunks(333) {
        enc.write_all(piece).unwrap();
    }
    let (index, chunks) = enc.finish().unwrap();
    assert_eq!(decode(&index, chunks, &config).unwrap(), data);
}

#[derive(Debug, Clone)]
enum Damage {
    FlipByte { chunk: usize, at: usize },
    Truncate { chunk: usize },
    Drop { chunk: usize },
    Duplicate { chunk: usize },
    Swap { a: usize, b: usize },
    OtherPlan { chunk: usize },
    OtherUpload { chunk: usize },
    IndexSize { delta: i64 },
    IndexHash,
    IndexCompression,
    ChunkRefHash { chunk: usize },
}

fn damage() -> impl Strategy<Value = Damage> {
    let i = 0usize..64;
    prop_oneof![
        (i.clone(), any::<usize>()).prop_map(|(chunk, at)| Damage::FlipByte { chunk, at }),
        i.clone().prop_map(|chunk| Damage::Truncate { chunk }),
        i.clone().prop_map(|chunk| Damage::Drop { chunk }),
        i.clone().prop_map(|chunk| Damage::Duplicate { chunk }),
        (i.clone(), i.clone()).prop_map(|(a, b)| Damage::Swap { a, b }),
        i.clone().prop_map(|chunk| Damage::OtherPlan { chunk }),
        i.clone().prop_map(|chunk| Damage::OtherUpload { chunk }),
        prop_oneof![-3i64..0, 1i64..4].prop_map(|delta| Damage::IndexSize { delta }),
        Just(Damage::IndexHash),
        Just(Damage::IndexCompression),
        i.prop_map(|chunk| Damage::ChunkRefHash { chunk }),
    ]
}

/// Applies the damage; `false` when it cannot apply (nothing to damage).
fn apply(d: &Damage, index: &mut PlanIndex, chunks: &mut Vec<Chunk>) -> bool {
    let n = chunks.len();
    match *d {
        _ if n == 0
            && !matches!(
                d,
                Damage::IndexSize { .. } | Damage::IndexHash | Damage::IndexCompression
            ) =>
        {
            false
        }
        Damage::FlipByte { chunk, at } => {
            let c = &mut chunks[chunk % n];
            if c.data.is_empty() {
                return false;
            }
            let at = at % c.data.len();
            c.data[at] ^= 0x40;
            true
        }
        Damage::Truncate { chunk } => chunks[chunk % n].data.pop().is_some(),
        Damage::Drop { chunk } => {
            chunks.remove(chunk % n);
            true
        }
        Damage::Duplicate { chunk } => {
            let c = chunks[chunk % n].clone();
            chunks.push(c);
            true
        }
        Damage::Swap { a, b } => {
            if n < 2 {
                return false;
            }
            let a = a % n;
            let b = if b % n == a { (a + 1) % n } else { b % n };
            let ia = chunks[a].header.index;
            chunks[a].header.index = chunks[b].header.index;
            chunks[b].header.index = ia;
            true
        }
        Damage::OtherPlan { chunk } => {
            chunks[chunk % n].header.plan_id = "plan-other-0000000000".into();
            true
        }
        Damage::OtherUpload { chunk } => {
            chunks[chunk % n].header.upload_id = "other".into();
            true
        }
        Damage::IndexSize { delta } => {
            let size = index.total_size as i64 + delta;
            if size < 0 {
                return false;
            }
            index.total_size = size as u64;
            true
        }
        Damage::IndexHash => {
            let mut h = index.sha256.clone().into_bytes();
            h[0] = if h[0] == b'0' { b'1' } else { b'0' };
            index.sha256 = String::from_utf8(h).unwrap();
            true
        }
        Damage::IndexCompression => {
            index.compression = if index.compression == "zstd" {
                "none".into()
            } else {
                "zstd".into()
            };
            true
        }
        Damage::ChunkRefHash { chunk } => {
            let r = &mut index.chunks[chunk % n];
            r.crc32 ^= 1;
            true
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, max_global_rejects: 1 << 16, ..ProptestConfig::default() })]

    #[test]
    fn any_plan_round_trips(
        len in prop_oneof![Just(0usize), 1usize..3000],
        chunk_size in 1usize..700,
        compressible in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let config = CodecConfig { chunk_size, sample_size: 1024, ..CodecConfig::default() };
        let data = if compressible { text(len) } else { noise(len, seed) };
        let (index, chunks) = encode(&data, &config);
        prop_assert!(chunks.iter().all(|c| c.data.len() <= chunk_size));
        prop_assert_eq!(decode(&index, chunks, &config).unwrap(), data);
    }

    /// Every damage to a stored plan is detected; nothing ever decodes to a wrong plan.
    #[test]
    fn every_corruption_is_detected(
        len in 1usize..3000,
        chunk_size in 16usize..700,
        compressible in any::<bool>(),
        seed in any::<u64>(),
        d in damage(),
    ) {
        let config = CodecConfig { chunk_size, sample_size: 1024, ..CodecConfig::default() };
        let data = if compressible { text(len) } else { noise(len, seed) };
        let (mut index, mut chunks) = encode(&data, &config);
        prop_assume!(apply(&d, &mut index, &mut chunks));
        if let Ok(plan) = decode(&index, chunks, &config) {
            // Only a damage that changed nothing observable may decode, and then to the
            // original (two chunks with identical bytes swapped).
            prop_assert_eq!(&plan, &data, "wrong plan after {:?}", d);
            prop_assert!(matches!(d, Damage::Swap { .. }), "{:?} went undetected", d);
        }
    }
}

#[test]
fn a_stream_that_does_not_decompress_is_reported_as_corrupt() {
    let config = small(1 << 20);
    // Raw bytes described, consistently, as zstd: every chunk checks out, the stream does not.
    let data = noise(5000, 4);
    let (mut index, chunks) = encode(&data, &config);
    assert_eq!(index.compression, "none");
    index.compression = "zstd".into();
    let err = decode(&index, chunks, &config).unwrap_err();
    assert!(matches!(err, PlanError::CorruptStream { .. }), "{err}");
}
