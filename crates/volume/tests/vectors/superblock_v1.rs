// The superblock whose encoding is committed as `superblock_v1.bin`: a raid6 member with a
// failed, a rebuilding and a spare entry. One definition for the format tests (which
// decode and re-encode the file against it) and the generator
// (`cargo run -p volume --example write_vectors`). `include!`d: the includer imports
// Superblock, MemberEntry, MemberState, plan_areas, DEFAULT_REGION_BYTES, LayoutParams
// and Uuid.

/// The superblock `superblock_v1.bin` holds.
fn vector_superblock() -> Superblock {
    let plan = plan_areas(1 << 30, 64 << 10, DEFAULT_REGION_BYTES, 0)
        .expect("a 1 GiB member has room for the areas");
    let uuid = |b: u8| Uuid::from_bytes([b; 16]);
    let mut members: Vec<MemberEntry> = (0..6u8)
        .map(|i| {
            let mut e = MemberEntry::new(uuid(0x10 + i), MemberState::Active, 1 << 30);
            e.failure_domain = format!("node-{i}");
            e
        })
        .collect();
    members[2].state = MemberState::Failed;
    members[2].state_generation = 6;
    members[4].state = MemberState::Rebuilding;
    members[2].valid_bytes = 1 << 20;
    members[4].rebuild_offset_bytes = 5 << 20;
    members[4].valid_bytes = 3 << 20;
    members.push(MemberEntry::new(uuid(0x20), MemberState::Spare, 2 << 30));
    Superblock {
        volume_uuid: uuid(0xA5),
        name: "vector-raid6".into(),
        member_uuid: uuid(0x11),
        member_index: 1,
        generation: 7,
        seq: 42,
        created_unix_secs: 1_700_000_000,
        clean: false,
        layout: LayoutParams::raid6(6),
        logical_block_bytes: 512,
        data_offset_bytes: plan.data_offset_bytes,
        usable_member_bytes: plan.usable_member_bytes,
        bitmap: plan.bitmap,
        journal_offset_bytes: 0,
        journal_bytes: 0,
        log: None,
        members,
    }
}
