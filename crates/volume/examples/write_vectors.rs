//! Writes the on-disk format test vectors (`crates/volume/tests/vectors/`) from their
//! definitions. Only for a deliberate format change (which also needs a new version, see
//! `docs/volume-format.md`); the format tests then check the new files byte for byte.
//!
//! `cargo run -p volume --example write_vectors`

use std::path::Path;
use std::process::ExitCode;

use uuid::Uuid;
use volume::LayoutParams;
use volume::format::{DEFAULT_REGION_BYTES, MemberEntry, MemberState, Superblock, plan_areas};

include!("../tests/vectors/superblock_v1.rs");

fn main() -> ExitCode {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors");
    let path = dir.join("superblock_v1.bin");
    match std::fs::write(&path, vector_superblock().encode()) {
        Ok(()) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot write {}: {e}", path.display());
            ExitCode::FAILURE
        }
    }
}
