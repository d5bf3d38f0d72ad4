//! Superblock format tests: fixed vector, round trips, hostile input.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::layout::LayoutParams;

// The committed vector (tests/vectors/superblock_v1.bin): `vector_superblock()`, shared
// with the generator `cargo run -p volume --example write_vectors`.
include!("../../tests/vectors/superblock_v1.rs");

const VECTOR: &[u8] = include_bytes!("../../tests/vectors/superblock_v1.bin");

#[test]
fn fixed_vector_decodes_and_reencodes() {
    let sb = Superblock::decode(VECTOR).unwrap();
    assert_eq!(sb, vector_superblock());
    assert_eq!(&sb.encode()[..], VECTOR);
    // Spot-check documented offsets so the doc and the code cannot drift apart.
    assert_eq!(&VECTOR[0..8], b"FBVOLUME");
    assert_eq!(u32::from_le_bytes(VECTOR[8..12].try_into().unwrap()), 1);
    assert_eq!(u64::from_le_bytes(VECTOR[56..64].try_into().unwrap()), 7);
    assert_eq!(VECTOR[80], 6, "level code raid6");
    assert_eq!(
        u32::from_le_bytes(VECTOR[96..100].try_into().unwrap()),
        64 << 10
    );
    assert_eq!(&VECTOR[168..180], b"vector-raid6");
    let e4 = 256 + 4 * 96;
    assert_eq!(VECTOR[e4 + 16], 4, "entry 4 state rebuilding");
    assert_eq!(
        u64::from_le_bytes(VECTOR[e4 + 80..e4 + 88].try_into().unwrap()),
        3 << 20,
        "entry 4 valid bytes"
    );
    assert_eq!(
        u64::from_le_bytes(VECTOR[e4 + 40..e4 + 48].try_into().unwrap()),
        5 << 20
    );
    assert_eq!(VECTOR[256 + 6 * 96 + 16], 3, "entry 6 spare");
}

/// A log-layout superblock is version 2 and round-trips; version 1 stays byte for byte
/// what it was (the vector), and a version 2 block without the log layout byte is refused.
#[test]
fn log_layout_superblock_is_version_2() {
    let mut sb = vector_superblock();
    sb.layout = crate::layout::LayoutParams::raid6(sb.layout.members);
    sb.log = Some(crate::log::LogParams {
        compression: crate::log::Compression::Zstd(7),
        block_bytes: 16384,
        logical_blocks: 12345,
    });
    let b = sb.encode();
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 2);
    assert_eq!(&b[232..236], &[1, 2, 7, 14]);
    assert_eq!(Superblock::decode(&b), Ok(sb.clone()));
    let mut bad = b;
    bad[232] = 0;
    let crc = {
        bad[12..16].fill(0);
        crc32c::crc32c(&bad)
    };
    bad[12..16].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        Superblock::decode(&bad),
        Err(FormatError::Field("data layout"))
    );
    sb.log = None;
    assert_eq!(sb.encode()[8], 1);
}

#[test]
fn rejects_bad_magic_version_and_checksum() {
    let good = vector_superblock().encode();
    let mut b = good;
    b[0] ^= 1;
    assert_eq!(Superblock::decode(&b), Err(FormatError::BadMagic));
    let mut b = good;
    b[8] = 3;
    assert_eq!(Superblock::decode(&b), Err(FormatError::Version(3)));
    let mut b = good;
    b[3000] ^= 0x40;
    assert!(matches!(
        Superblock::decode(&b),
        Err(FormatError::Checksum { .. })
    ));
    assert_eq!(
        Superblock::decode(&good[..100]),
        Err(FormatError::Short(100))
    );
}

/// Re-encodes with a fixed-up checksum so validation (not the CRC) must catch it.
fn with_crc(mut b: [u8; SUPERBLOCK_BYTES]) -> [u8; SUPERBLOCK_BYTES] {
    b[12..16].fill(0);
    let crc = crc32c::crc32c(&b);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn rejects_inconsistent_fields_with_valid_crc() {
    let good = vector_superblock().encode();
    type Mutation = Box<dyn Fn(&mut [u8; SUPERBLOCK_BYTES])>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("level", Box::new(|b| b[80] = 7)),
        ("k", Box::new(|b| b[84] = 9)),
        ("entry count", Box::new(|b| b[90] = 200)),
        ("member index", Box::new(|b| b[92] = 30)),
        ("name len", Box::new(|b| b[81] = 65)),
        ("name utf8", Box::new(|b| b[168] = 0xFF)),
        ("state", Box::new(|b| b[256 + 16] = 9)),
        ("spare in slot", Box::new(|b| b[256 + 16] = 3)),
        ("stripe unit", Box::new(|b| b[96] = 1)),
        ("logical block", Box::new(|b| b[100] = 3)),
        ("region count", Box::new(|b| b[144] ^= 1)),
        ("member uuid", Box::new(|b| b[40] ^= 1)),
        (
            "data offset",
            Box::new(|b| b[104..112].copy_from_slice(&4096u64.to_le_bytes())),
        ),
        (
            "usable overflow",
            Box::new(|b| b[112..120].copy_from_slice(&(u64::MAX / 65536 * 65536).to_le_bytes())),
        ),
    ];
    for (what, mutate) in cases {
        let mut b = good;
        mutate(&mut b);
        assert!(Superblock::decode(&with_crc(b)).is_err(), "{what} accepted");
    }
}

/// The operator-failed flag lives in entry byte 17, reserved (zero) in every superblock
/// written before it: old superblocks read as "failed by an error" (the old meaning), a
/// flagged one re-encodes byte for byte, and the v1 vector is otherwise unchanged.
#[test]
fn operator_failed_flag_is_compatible_with_v1() {
    let old = Superblock::decode(VECTOR).unwrap();
    assert!(old.members.iter().all(|e| !e.failed_by_operator));
    let e2 = 256 + 2 * 96;
    assert_eq!(VECTOR[e2 + 16], 2, "entry 2 is failed in the vector");
    assert_eq!(VECTOR[e2 + 17], 0, "byte 17 was reserved, zero");

    // The vector with the flag set on its failed entry, as a new writer writes it.
    let mut flagged = [0u8; SUPERBLOCK_BYTES];
    flagged.copy_from_slice(VECTOR);
    flagged[e2 + 17] = 1;
    let flagged = with_crc(flagged);
    let sb = Superblock::decode(&flagged).unwrap();
    assert!(sb.members[2].failed_by_operator);
    let mut want = vector_superblock();
    want.members[2].failed_by_operator = true;
    assert_eq!(sb, want);
    assert_eq!(want.encode(), flagged, "only byte 17 (and the CRC) differ");
    let diff: Vec<usize> = (0..SUPERBLOCK_BYTES)
        .filter(|&i| flagged[i] != VECTOR[i] && !(12..16).contains(&i))
        .collect();
    assert_eq!(diff, [e2 + 17]);

    // The flag only means something on a failed entry.
    let mut b = flagged;
    b[256 + 17] = 1; // entry 0 is active
    assert_eq!(
        Superblock::decode(&with_crc(b)),
        Err(FormatError::Field(
            "operator-failed flag on a member not failed"
        ))
    );
    // Other bits stay reserved: ignored on read, written zero.
    let mut b = flagged;
    b[e2 + 17] = 0x81;
    let sb = Superblock::decode(&with_crc(b)).unwrap();
    assert!(sb.members[2].failed_by_operator);
    assert_eq!(sb.encode(), flagged);
}

fn arb_entry(slot: bool) -> impl Strategy<Value = MemberEntry> {
    let states = if slot {
        prop_oneof![
            Just(MemberState::Active),
            Just(MemberState::Failed),
            Just(MemberState::Rebuilding)
        ]
        .boxed()
    } else {
        prop_oneof![Just(MemberState::Spare), Just(MemberState::Replacing)].boxed()
    };
    (
        any::<[u8; 16]>(),
        states,
        "[a-z0-9/é-]{0,10}",
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(u, state, domain, device_bytes, left, off, valid, operator)| MemberEntry {
                uuid: Uuid::from_bytes(u),
                state,
                failure_domain: domain,
                device_bytes,
                state_generation: left,
                rebuild_offset_bytes: off,
                valid_bytes: valid,
                failed_by_operator: operator && state == MemberState::Failed,
                // Slot 0 exists in every generated table.
                replaces: (state == MemberState::Replacing).then_some(0),
            },
        )
}

fn arb_superblock() -> impl Strategy<Value = Superblock> {
    (
        2usize..8,
        0usize..4,
        "[ -~]{0,64}",
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
        22u64..40,
    )
        .prop_flat_map(|(n, spares, name, generation, seq, clean, size_log)| {
            let slots = proptest::collection::vec(arb_entry(true), n);
            let spare = proptest::collection::vec(arb_entry(false), spares);
            (slots, spare, 0usize..n + spares).prop_map(move |(mut members, spare, idx)| {
                members.extend(spare);
                let plan = plan_areas(1 << size_log, 64 << 10, DEFAULT_REGION_BYTES, 0).unwrap();
                Superblock {
                    volume_uuid: Uuid::from_bytes([7; 16]),
                    name: name.clone(),
                    member_uuid: members[idx].uuid,
                    member_index: idx,
                    generation,
                    seq,
                    created_unix_secs: 1,
                    clean,
                    layout: LayoutParams::raid1(n),
                    logical_block_bytes: 4096,
                    data_offset_bytes: plan.data_offset_bytes,
                    usable_member_bytes: plan.usable_member_bytes,
                    bitmap: plan.bitmap,
                    journal_offset_bytes: 0,
                    journal_bytes: 0,
                    log: None,
                    members,
                }
            })
        })
}

proptest! {
    #[test]
    fn encode_decode_round_trip(sb in arb_superblock()) {
        let bytes = sb.encode();
        prop_assert_eq!(Superblock::decode(&bytes).unwrap(), sb);
    }

    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..5000)) {
        let _ = Superblock::decode(&bytes);
    }

    /// Random corruption of a valid block with the CRC fixed up: decode must not panic and
    /// anything it accepts must re-encode to the same bytes.
    #[test]
    fn corrupted_fields_never_panic(flips in proptest::collection::vec((0usize..SUPERBLOCK_BYTES, any::<u8>()), 1..8)) {
        let mut b = vector_superblock().encode();
        for (at, v) in flips {
            b[at] = v;
        }
        let b = with_crc(b);
        if let Ok(sb) = Superblock::decode(&b) {
            // Reserved bytes are not preserved; everything decoded is.
            prop_assert_eq!(Superblock::decode(&sb.encode()).unwrap(), sb);
        }
    }
}
