//! The seed corpus of the `pdu_decode` fuzz target (fuzz/corpus/pdu_decode/seed-*):
//! valid PDUs carrying every structure this crate encodes. The test checks that each
//! seed frames and decodes, and that the files in the repository are exactly these PDUs.
//! Regenerate them with `FERROBAY_WRITE_FUZZ_CORPUS=1 cargo test -p nvme-proto --test
//! fuzz_seed_corpus`.

use std::path::PathBuf;

use nvme_proto::command::Command;
use nvme_proto::dsm::{DsmCommand, DsmRange, dsm_attr};
use nvme_proto::fabrics::{
    CNTLID_DYNAMIC, Cap, ConnectCommand, ConnectData, ConnectResponse, DISCOVERY_NQN, PropertyGet,
    PropertySize, reg,
};
use nvme_proto::identify::{
    IdentifyCommand, IdentifyController, IdentifyNamespace, IdentifyNsIndependent,
    IoCommandSetCombinations, LbaFormat, NsIdDescriptor, NsIdDescriptorList, cns, csi,
};
use nvme_proto::kv::{
    KvCommand, KvFormat, KvIdentifyNamespace, KvKey, StoreMode, encode_list,
    identify::KV_FORMAT_COUNT,
};
use nvme_proto::log::{
    AnaGroupDescriptor, AnaLog, DiscoveryLog, DiscoveryLogEntry, GetLogPageCommand, SmartLog,
    ana_state, lid,
};
use nvme_proto::reservation::{
    RegisterData, RegisteredController, ReservationRegister, ReservationStatus, rrega,
};
use nvme_proto::sgl::SglDescriptor;
use nvme_proto::tcp::{
    CH_BYTES, CommonHeader, DataHeader, Digests, FatalError, Framing, IcReq, IcResp, PduHeader,
    R2t, check_header_digest, data_digest, encode_header, encode_term_req, layout, pdu_flags,
};

/// A whole PDU: header (with digest and padding), data and data digest.
fn pdu(h: &PduHeader, flags: u8, data: &[u8], digests: Digests) -> Vec<u8> {
    let fr = Framing {
        digests,
        data_align_bytes: 0,
    };
    let mut v = encode_header(h, flags, data.len(), fr).as_bytes().to_vec();
    v.extend_from_slice(data);
    if digests.data && !data.is_empty() {
        v.extend_from_slice(&data_digest(data));
    }
    v
}

fn capsule(c: Command, data: &[u8], digests: Digests) -> Vec<u8> {
    pdu(&PduHeader::CapsuleCmd(c), 0, data, digests)
}

fn c2h(cccid: u16, data: &[u8], digests: Digests) -> Vec<u8> {
    let h = PduHeader::C2HData(DataHeader {
        cccid,
        ttag: 0,
        offset: 0,
        length: data.len() as u32,
    });
    pdu(&h, pdu_flags::LAST_PDU | pdu_flags::SUCCESS, data, digests)
}

fn seeds() -> Vec<(&'static str, Vec<u8>, Option<Digests>)> {
    let none = Digests::default();
    let both = Digests {
        header: true,
        data: true,
    };
    let connect_data = ConnectData {
        hostid: [0x5A; 16],
        cntlid: CNTLID_DYNAMIC,
        subnqn: "nqn.2026-01.io.ferrobay:n1:d0".into(),
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001".into(),
    }
    .to_bytes();
    let connect = ConnectCommand {
        recfmt: 0,
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato_ms: 5000,
    }
    .to_command(1);

    let mut idc = IdentifyController {
        vid: 0x1D1D,
        sn: "FB0001".into(),
        mn: "Ferrobay".into(),
        fr: "0.1.0".into(),
        cmic: 0x0B,
        mdts: 8,
        cntlid: 1,
        ver: 0x0002_0000,
        cntrltype: 1,
        kas: 10,
        sqes: 0x66,
        cqes: 0x44,
        maxcmd: 128,
        nn: 32,
        oncs: 0x2D,
        vwc: 1,
        sgls: 0x0010_0001,
        mnan: 32,
        anacap: 0x07,
        anagrpmax: 1,
        nanagrpid: 1,
        subnqn: "nqn.2026-01.io.ferrobay:n1:d0".into(),
        ioccsz: 516,
        iorcsz: 1,
        msdbd: 1,
        ofcs: 1,
        ..Default::default()
    };
    idc.psd[0].mp = 2500;
    let mut ns = IdentifyNamespace {
        nsze: 1 << 21,
        ncap: 1 << 21,
        nuse: 1 << 21,
        nlbaf: 1,
        nmic: 1,
        rescap: 0xFF,
        dlfeat: 0x09,
        anagrpid: 1,
        nguid: [0x42; 16],
        eui64: [0x24; 8],
        ..Default::default()
    };
    ns.lbaf[0] = LbaFormat::new(9);
    ns.lbaf[1] = LbaFormat::new(12);
    let descs = NsIdDescriptorList {
        descriptors: vec![
            NsIdDescriptor::Nguid([0x42; 16]),
            NsIdDescriptor::Uuid([0x43; 16]),
            NsIdDescriptor::Csi(0),
        ],
    };
    let entry = |subtype, nqn: &str| DiscoveryLogEntry {
        trtype: 3,
        adrfam: 1,
        subtype,
        treq: 2,
        portid: 1,
        cntlid: 0xFFFF,
        asqsz: 32,
        eflags: 0,
        trsvcid: "4420".into(),
        subnqn: nqn.into(),
        traddr: "127.0.0.1".into(),
        sectype: 0,
    };
    let disc = DiscoveryLog {
        genctr: 1,
        recfmt: 0,
        entries: vec![
            entry(3, DISCOVERY_NQN),
            entry(2, "nqn.2026-01.io.ferrobay:n1:d0"),
        ],
    };
    let smart = SmartLog {
        composite_temperature_k: 310,
        available_spare_pct: 100,
        available_spare_threshold_pct: 10,
        data_units_read: 12,
        data_units_written: 34,
        host_read_commands: 1000,
        host_write_commands: 2000,
        power_cycles: 3,
        power_on_hours: 4,
        ..Default::default()
    };
    let ana = AnaLog {
        chgcnt: 1,
        groups: vec![AnaGroupDescriptor {
            anagrpid: 1,
            chgcnt: 1,
            state: ana_state::OPTIMIZED,
            nsids: vec![1, 2],
        }],
    };
    let resv = ReservationStatus {
        generation: 2,
        rtype: 1,
        ptpls: false,
        registrants: vec![RegisteredController {
            cntlid: 1,
            rcsts: 1,
            hostid: [0x5A; 16],
            rkey: 0xABCD,
        }],
    };
    let mut dsm = DsmCommand {
        ranges: 2,
        attributes: dsm_attr::AD,
    }
    .to_command(9, 1);
    dsm.set_sgl1(SglDescriptor::in_capsule(0, 32));
    let ranges = DsmRange::encode_list(&[
        DsmRange {
            context_attributes: 0,
            nlb: 8,
            slba: 0,
        },
        DsmRange {
            context_attributes: 0,
            nlb: 16,
            slba: 1024,
        },
    ]);
    let mut resv_reg = ReservationRegister {
        rrega: rrega::REGISTER,
        iekey: false,
        cptpl: 3,
    }
    .to_command(10, 1);
    resv_reg.set_sgl1(SglDescriptor::in_capsule(0, 16));
    let mut connect_resp = ConnectResponse {
        cntlid: 1,
        authreq: 0,
    }
    .completion(1);
    connect_resp.sqhd = 1;
    let prop_resp = PropertyGet {
        size: PropertySize::Eight,
        ofst: reg::CAP,
    }
    .completion(
        2,
        Cap {
            mqes: 127,
            cqr: true,
            to_500ms: 30,
            css: Cap::CSS_NVM,
            ..Default::default()
        }
        .to_u64(),
    );

    let key = |b: &[u8]| KvKey::new(b).expect("seed keys are 1..=16 bytes");
    let mut kv_store = KvCommand::Store {
        key: key(b"bucket/obj-0001"),
        value_size_bytes: 64,
        mode: StoreMode::OnlyIfAbsent,
        no_compression: false,
    }
    .to_command(20, 2);
    kv_store.set_sgl1(SglDescriptor::in_capsule(0, 64));
    let kv_retrieve = KvCommand::Retrieve {
        key: key(b"bucket/obj-0001"),
        host_buffer_bytes: 4096,
        raw: false,
    }
    .to_command(21, 2);
    let kv_list = KvCommand::List {
        start: Some(key(b"bucket/")),
        host_buffer_bytes: 4096,
    }
    .to_command(22, 2);
    let kv_exist = KvCommand::Exist {
        key: key(&[0x00, 0xFF, 0x10]),
    }
    .to_command(23, 2);
    let kv_list_data = encode_list(&[key(b"a"), key(b"bucket/obj-0001"), key(&[0xEE; 16])], 128);
    let mut kvf = [KvFormat::default(); KV_FORMAT_COUNT];
    kvf[0] = KvFormat {
        max_key_bytes: 16,
        afo: 0,
        max_value_bytes: 2 << 20,
        max_keys: 0,
    };
    let kv_ns = KvIdentifyNamespace {
        nsze_bytes: 1 << 30,
        nuse_bytes: 4096,
        nmic: 1,
        anagrpid: 1,
        nguid: [0x4B; 16],
        kvf,
        ..Default::default()
    };
    let ns_indep = IdentifyNsIndependent {
        nmic: 1,
        anagrpid: 1,
        nstat: 1,
        ..Default::default()
    };
    let iocs = IoCommandSetCombinations::single(&[csi::NVM, csi::KEY_VALUE]);

    vec![
        (
            "seed-icreq",
            pdu(
                &PduHeader::IcReq(IcReq {
                    pfv: 0,
                    hpda: 0,
                    digests: both,
                    maxr2t: 0,
                }),
                0,
                &[],
                none,
            ),
            None,
        ),
        (
            "seed-icresp",
            pdu(
                &PduHeader::IcResp(IcResp {
                    pfv: 0,
                    cpda: 0,
                    digests: both,
                    maxh2cdata: 1 << 17,
                }),
                0,
                &[],
                none,
            ),
            None,
        ),
        (
            "seed-connect",
            capsule(connect, &connect_data, none),
            Some(none),
        ),
        (
            "seed-connect-digests",
            capsule(connect, &connect_data, both),
            Some(both),
        ),
        (
            "seed-connect-resp",
            pdu(&PduHeader::CapsuleResp(connect_resp), 0, &[], none),
            Some(none),
        ),
        (
            "seed-property-get-cap",
            capsule(
                PropertyGet {
                    size: PropertySize::Eight,
                    ofst: reg::CAP,
                }
                .to_command(2),
                &[],
                none,
            ),
            Some(none),
        ),
        (
            "seed-property-resp",
            pdu(&PduHeader::CapsuleResp(prop_resp), 0, &[], none),
            Some(none),
        ),
        (
            "seed-identify-ctrl-cmd",
            capsule(
                IdentifyCommand {
                    cns: cns::CONTROLLER,
                    ..Default::default()
                }
                .to_command(3),
                &[],
                none,
            ),
            Some(none),
        ),
        (
            "seed-identify-ctrl-data",
            c2h(3, &idc.to_bytes()[..], both),
            Some(both),
        ),
        (
            "seed-identify-ns-data",
            c2h(4, &ns.to_bytes()[..], none),
            Some(none),
        ),
        (
            "seed-ns-descriptors",
            c2h(5, &descs.to_bytes()[..], none),
            Some(none),
        ),
        (
            "seed-get-log-discovery",
            capsule(
                GetLogPageCommand::new(lid::DISCOVERY, 0, 1024, 4096).to_command(6),
                &[],
                none,
            ),
            Some(none),
        ),
        (
            "seed-discovery-log",
            c2h(6, &disc.to_bytes(), none),
            Some(none),
        ),
        (
            "seed-smart-log",
            c2h(7, &smart.to_bytes(), none),
            Some(none),
        ),
        ("seed-ana-log", c2h(8, &ana.to_bytes(), none), Some(none)),
        ("seed-dsm", capsule(dsm, &ranges, none), Some(none)),
        (
            "seed-resv-register",
            capsule(
                resv_reg,
                &RegisterData {
                    crkey: 0,
                    nrkey: 0xABCD,
                }
                .to_bytes(),
                none,
            ),
            Some(none),
        ),
        (
            "seed-resv-report",
            c2h(11, &resv.to_bytes(true), none),
            Some(none),
        ),
        (
            "seed-r2t",
            pdu(
                &PduHeader::R2t(R2t {
                    cccid: 12,
                    ttag: 1,
                    offset: 0,
                    length: 8192,
                }),
                0,
                &[],
                both,
            ),
            Some(both),
        ),
        (
            "seed-h2c-data",
            pdu(
                &PduHeader::H2CData(DataHeader {
                    cccid: 12,
                    ttag: 1,
                    offset: 0,
                    length: 512,
                }),
                pdu_flags::LAST_PDU,
                &[0xA5; 512],
                both,
            ),
            Some(both),
        ),
        (
            "seed-kv-store",
            capsule(kv_store, &[0x5A; 64], none),
            Some(none),
        ),
        (
            "seed-kv-retrieve",
            capsule(kv_retrieve, &[], none),
            Some(none),
        ),
        ("seed-kv-list-cmd", capsule(kv_list, &[], both), Some(both)),
        ("seed-kv-exist", capsule(kv_exist, &[], none), Some(none)),
        (
            "seed-kv-list-data",
            c2h(22, &kv_list_data, none),
            Some(none),
        ),
        (
            "seed-kv-identify-ns",
            c2h(24, &kv_ns.to_bytes()[..], none),
            Some(none),
        ),
        (
            "seed-identify-ns-independent",
            c2h(25, &ns_indep.to_bytes()[..], none),
            Some(none),
        ),
        (
            "seed-identify-io-command-sets",
            c2h(26, &iocs.to_bytes()[..], none),
            Some(none),
        ),
        (
            "seed-c2h-term-req",
            encode_term_req(true, &FatalError::header_digest(), &[0x04, 0x01, 72, 0]),
            None,
        ),
    ]
}

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/pdu_decode")
}

#[test]
fn seeds_frame_and_decode() {
    for (name, bytes, digests) in seeds() {
        let mut a = [0u8; CH_BYTES];
        a.copy_from_slice(&bytes[..CH_BYTES]);
        let ch = CommonHeader::decode(&a);
        let l = layout(&ch, digests, 1 << 20).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(l.total_len, bytes.len(), "{name}");
        PduHeader::decode(&ch, &bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if l.has_hdgst {
            check_header_digest(&bytes, l.hlen).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        if l.has_ddgst {
            let end = l.data_offset + l.data_len;
            assert_eq!(
                data_digest(&bytes[l.data_offset..end]),
                bytes[end..end + 4],
                "{name}"
            );
        }
    }
}

/// The KV seeds carry what their names say: the capsules decode as KV commands and the
/// data decodes with the KV decoders.
#[test]
fn kv_seeds_decode_as_kv() {
    let seeds = seeds();
    let get = |name: &str| {
        let (_, bytes, digests) = seeds
            .iter()
            .find(|(n, _, _)| *n == name)
            .unwrap_or_else(|| panic!("no seed {name}"));
        let mut a = [0u8; CH_BYTES];
        a.copy_from_slice(&bytes[..CH_BYTES]);
        let ch = CommonHeader::decode(&a);
        let l = layout(&ch, *digests, 1 << 20).unwrap_or_else(|e| panic!("{name}: {e}"));
        let h = PduHeader::decode(&ch, bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        (h, bytes[l.data_offset..l.data_offset + l.data_len].to_vec())
    };
    for name in [
        "seed-kv-store",
        "seed-kv-retrieve",
        "seed-kv-list-cmd",
        "seed-kv-exist",
    ] {
        let (PduHeader::CapsuleCmd(c), data) = get(name) else {
            panic!("{name} is not a capsule");
        };
        let cmd = KvCommand::decode(&c).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let KvCommand::Store {
            value_size_bytes, ..
        } = cmd
        {
            assert_eq!(value_size_bytes as usize, data.len(), "{name}");
        }
    }
    let (_, list) = get("seed-kv-list-data");
    let keys = nvme_proto::kv::KvListData::parse(&list)
        .expect("list seed parses")
        .to_vec();
    assert_eq!(keys.len(), 3);
    let (_, ns) = get("seed-kv-identify-ns");
    assert_eq!(
        KvIdentifyNamespace::decode(&ns)
            .expect("KV identify seed")
            .kvf[0]
            .max_key_bytes,
        16
    );
    let (_, iocs) = get("seed-identify-io-command-sets");
    assert_eq!(
        IoCommandSetCombinations::decode(&iocs)
            .expect("CNS 1Ch seed")
            .get(0),
        0b11
    );
    let (_, ind) = get("seed-identify-ns-independent");
    assert_eq!(
        IdentifyNsIndependent::decode(&ind)
            .expect("CNS 08h seed")
            .nstat,
        1
    );
}

#[test]
fn repository_corpus_matches_seeds() {
    let dir = corpus_dir();
    let write = std::env::var_os("FERROBAY_WRITE_FUZZ_CORPUS").is_some();
    for (name, bytes, _) in seeds() {
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (regenerate with FERROBAY_WRITE_FUZZ_CORPUS=1)",
                path.display()
            )
        });
        assert!(on_disk == bytes, "{name} differs from the generated seed");
    }
}
