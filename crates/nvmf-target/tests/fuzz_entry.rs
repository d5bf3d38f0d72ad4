//! The fuzzing entry point survives hand-picked and random inputs (and so does a real
//! session fed through it).

use nvme_proto::fabrics::{ConnectCommand, ConnectData, PropertySet, PropertySize};
use nvme_proto::tcp::{Digests, Framing, IcReq, PduHeader, encode_header};
use nvme_proto::{Command, SglDescriptor};
use nvmf_target::fuzz_one_connection;
use proptest::prelude::*;

fn pdu(h: &PduHeader, data: &[u8]) -> Vec<u8> {
    let mut v = encode_header(h, 0, data.len(), Framing::default())
        .as_bytes()
        .to_vec();
    v.extend_from_slice(data);
    v
}

/// A well-formed session prefix: ICReq, admin Connect, a property get.
fn session() -> Vec<u8> {
    let mut v = pdu(
        &PduHeader::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: Digests::default(),
            maxr2t: 0,
        }),
        &[],
    );
    let cmd = ConnectCommand {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato_ms: 0,
    }
    .to_command(1);
    let data = ConnectData {
        hostid: [1; 16],
        cntlid: 0xFFFF,
        subnqn: "nqn.2026-01.io.ferrobay:fuzz".into(),
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001".into(),
    }
    .to_bytes();
    v.extend(pdu(&PduHeader::CapsuleCmd(cmd), &data));
    let en = PropertySet {
        size: PropertySize::Four,
        ofst: 0x14,
        value: 1 | (6 << 16) | (4 << 20),
    }
    .to_command(3);
    v.extend(pdu(&PduHeader::CapsuleCmd(en), &[]));
    let mut id = Command::new(0x06, 2, 0);
    id.set_cdw10(1).set_sgl1(SglDescriptor::transport(4096));
    v.extend(pdu(&PduHeader::CapsuleCmd(id), &[]));
    v
}

#[test]
fn fixed_inputs() {
    fuzz_one_connection(&[]);
    fuzz_one_connection(&[0u8; 7]);
    fuzz_one_connection(&[0xFF; 300]);
    let s = session();
    // ICResp, Connect and Property Set responses, identify data (C2HData header + 4096)
    // and its response.
    assert_eq!(fuzz_one_connection(&s), 128 + 24 + 24 + 24 + 4096 + 24);
    for cut in [1, 8, 100, 128, 200, s.len() - 1] {
        fuzz_one_connection(&s[..cut]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
    #[test]
    fn random_tails_after_a_valid_session(tail in proptest::collection::vec(any::<u8>(), 0..600), flip in 0usize..1500, bit in 0u8..8) {
        let mut s = session();
        if flip < s.len() {
            s[flip] ^= 1 << bit;
        }
        s.extend(tail);
        fuzz_one_connection(&s);
    }
}
