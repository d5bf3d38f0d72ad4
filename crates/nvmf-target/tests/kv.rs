//! Key Value namespaces over real TCP: how a controller offers the command set (CAP.CSS,
//! CC.CSS, Identify, effects, features), Store/Retrieve/List/Delete/Exist end to end
//! against a `BTreeMap` model, Namespace Management with CSI 01h, reservations, and bad
//! input: every case gets the status the specification demands and the connection keeps
//! working.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use nvme_proto::fabrics::{Cap, Cc, PropertySize, reg};
use nvme_proto::features::{GetFeatures, SetFeatures, fid};
use nvme_proto::identify::{
    IdentifyNsIndependent, IoCommandSetCombinations, NsIdDescriptorList, NsMgmtCommand,
    NsMgmtCreate, cns, csi,
};
use nvme_proto::kv::{KvCommand, KvIdentifyNamespace, KvKey, KvListData, KvNsCreate, StoreMode};
use nvme_proto::log::effects::effect;
use nvme_proto::log::{CommandEffectsLog, GetLogPageCommand, lid};
use nvme_proto::opcode::{io, kv as kvop};
use nvme_proto::{Command, Status};
use nvmf_target::{
    CreateKvNamespace, CreateNamespace, KvBackend, KvBackendError, KvNamespaceConfig, MemKvBackend,
    NamespaceConfig, NamespaceManager, SubsystemConfig, Target, TargetConfig,
};

const NVM_NSID: u32 = 1;
const KV_NSID: u32 = 2;
const MAX_VALUE: u32 = 2 << 20;
const KV_CAPACITY: u64 = 64 << 20;
const KV_MAX_KEYS: u64 = 1000;

struct KvTarget {
    target: Target,
    addr: SocketAddr,
    kv: Arc<MemKvBackend>,
    _listener: nvmf_target::ListenerHandle,
}

/// A target with an NVM namespace (1, RAM) and a KV namespace (2, `MemKvBackend`).
async fn kv_target() -> KvTarget {
    let target = Target::new(TargetConfig::default()).expect("target");
    target
        .add_subsystem(SubsystemConfig::new(SUBNQN))
        .expect("subsystem");
    let dev = Arc::new(blockdev::RamDevice::new("ram0", 16 << 20));
    target
        .add_namespace(SUBNQN, NamespaceConfig::whole_device(NVM_NSID, dev))
        .expect("nvm namespace");
    let kv = Arc::new(MemKvBackend::new(KV_CAPACITY, KV_MAX_KEYS));
    target
        .add_kv_namespace(
            SUBNQN,
            KvNamespaceConfig::new(KV_NSID, kv.clone(), MAX_VALUE),
        )
        .expect("kv namespace");
    let l = target
        .listen("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("listen");
    KvTarget {
        target,
        addr: l.local_addr(),
        kv,
        _listener: l,
    }
}

/// Admin queue enabled with CC.CSS = `css` (110b: all I/O command sets, as Linux does).
async fn admin_css(addr: SocketAddr, css: u8) -> Client {
    let mut c = Client::tcp(addr).await;
    c.icreq(false, false).await;
    let r = c.fabrics_connect(0, 31, 0, SUBNQN, HOSTNQN, 0xFFFF).await;
    assert_eq!(r.status, Status::SUCCESS, "admin connect");
    let cc = Cc {
        en: true,
        css,
        iosqes: 6,
        iocqes: 4,
        ..Cc::default()
    };
    assert_eq!(
        c.prop_set(reg::CC, u64::from(cc.to_u32())).await,
        Status::SUCCESS
    );
    let (st, csts) = c.prop_get(reg::CSTS, PropertySize::Four).await;
    assert_eq!((st, csts & 1), (Status::SUCCESS, 1), "CSTS.RDY");
    c
}

/// Admin (CC.CSS = 110b) and one I/O queue.
async fn kv_setup() -> (KvTarget, Client, Client) {
    let t = kv_target().await;
    let a = admin_css(t.addr, Cc::CSS_ALL_IO).await;
    let q = Client::io_queue_of(t.addr, &a, SUBNQN, 1).await;
    (t, a, q)
}

fn key(b: &[u8]) -> KvKey {
    KvKey::new(b).expect("key")
}

fn store(k: &[u8], len: usize, mode: StoreMode) -> Command {
    KvCommand::Store {
        key: key(k),
        value_size_bytes: len as u32,
        mode,
        no_compression: false,
    }
    .to_command(0, KV_NSID)
}

fn retrieve(k: &[u8], hbs: u32) -> Command {
    KvCommand::Retrieve {
        key: key(k),
        host_buffer_bytes: hbs,
        raw: false,
    }
    .to_command(0, KV_NSID)
}

fn list(start: Option<&[u8]>, hbs: u32) -> Command {
    KvCommand::List {
        start: start.map(key),
        host_buffer_bytes: hbs,
    }
    .to_command(0, KV_NSID)
}

fn delete(k: &[u8]) -> Command {
    KvCommand::Delete { key: key(k) }.to_command(0, KV_NSID)
}

fn exist(k: &[u8]) -> Command {
    KvCommand::Exist { key: key(k) }.to_command(0, KV_NSID)
}

fn identify(cns_: u8, nsid: u32, csi_: u8) -> Command {
    let mut c = identify_cmd(cns_, nsid);
    c.set_cdw11(u32::from(csi_) << 24);
    c
}

fn list_keys(data: &[u8]) -> Vec<Vec<u8>> {
    KvListData::parse(data)
        .expect("list data")
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect()
}

/// Stores `value` under `k` and reads it back (through R2T when it is large).
async fn roundtrip(q: &mut Client, k: &[u8], value: &[u8]) {
    let (c, _) = q
        .exec(store(k, value.len(), StoreMode::Always), Some(value), 0)
        .await;
    assert_eq!(c.status, Status::SUCCESS, "store {k:?}");
    let (c, back) = q
        .exec(retrieve(k, value.len() as u32), None, value.len())
        .await;
    assert_eq!(c.status, Status::SUCCESS, "retrieve {k:?}");
    assert_eq!(c.dw0 as usize, value.len(), "DW0: the value's size");
    assert!(back == value, "bytes read back equal bytes stored");
}

/// The connection still serves commands after a rejected one.
async fn still_works(q: &mut Client) {
    roundtrip(q, b"still-works", &pattern(777, 3)).await;
}

#[tokio::test]
async fn controller_offers_kv_and_identifies_the_namespace() {
    let (t, mut a, mut q) = kv_setup().await;
    let (st, cap) = a.prop_get(reg::CAP, PropertySize::Eight).await;
    assert_eq!(st, Status::SUCCESS);
    let cap = Cap::from_u64(cap);
    assert!(cap.accepts_cc_css(Cc::CSS_ALL_IO) && cap.accepts_cc_css(Cc::CSS_NVM));

    // CNS 1Ch: one combination, NVM + KV.
    let (c, d) = a
        .exec(identify(cns::IO_COMMAND_SET, 0, 0), None, 4096)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(
        IoCommandSetCombinations::decode(&d).expect("1Ch").get(0),
        0b11
    );
    // Active lists: both, and per command set.
    let (_, d) = a
        .exec(identify(cns::ACTIVE_NS_LIST, 0, 0), None, 4096)
        .await;
    assert_eq!(&d[..12], &[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
    let (_, d) = a
        .exec(
            identify(cns::CS_ACTIVE_NS_LIST, 0, csi::KEY_VALUE),
            None,
            4096,
        )
        .await;
    assert_eq!(&d[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);
    let (_, d) = a
        .exec(identify(cns::CS_ACTIVE_NS_LIST, 0, csi::NVM), None, 4096)
        .await;
    assert_eq!(&d[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    // The descriptor list names the command set (Linux drops a namespace without it).
    let (_, d) = a
        .exec(identify(cns::NS_ID_DESCRIPTORS, KV_NSID, 0), None, 4096)
        .await;
    assert_eq!(
        NsIdDescriptorList::decode(&d).expect("descriptors").csi(),
        Some(csi::KEY_VALUE)
    );
    // CNS 08h: ready, shared, no volatile write cache.
    let (c, d) = a
        .exec(
            identify(cns::CS_INDEPENDENT_NAMESPACE, KV_NSID, 0),
            None,
            4096,
        )
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    let ind = IdentifyNsIndependent::decode(&d).expect("08h");
    assert_eq!((ind.nstat & 1, ind.nmic & 1), (1, 1));
    assert_eq!(ind.anagrpid, 1);
    // CNS 05h with CSI 01h: the KV format and sizes in bytes.
    let (c, d) = a
        .exec(
            identify(cns::CS_NAMESPACE, KV_NSID, csi::KEY_VALUE),
            None,
            4096,
        )
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    let id = KvIdentifyNamespace::decode(&d).expect("05h");
    assert_eq!(id.nkvf, 0);
    let f = id.formats()[0];
    assert_eq!(
        (f.max_key_bytes, f.max_value_bytes, f.max_keys),
        (16, MAX_VALUE, KV_MAX_KEYS as u32)
    );
    assert_eq!((id.nsze_bytes, id.nuse_bytes), (KV_CAPACITY, 0));
    // NUSE follows what is stored.
    roundtrip(&mut q, b"a", &pattern(5000, 1)).await;
    let (_, d) = a
        .exec(
            identify(cns::CS_NAMESPACE, KV_NSID, csi::KEY_VALUE),
            None,
            4096,
        )
        .await;
    assert_eq!(
        KvIdentifyNamespace::decode(&d).expect("05h").nuse_bytes,
        5000
    );
    // Structures of the other command set: Invalid I/O Command Set.
    for cmd in [
        identify(cns::NAMESPACE, KV_NSID, 0),
        identify(cns::CS_NAMESPACE, KV_NSID, csi::NVM),
        identify(cns::CS_NAMESPACE, NVM_NSID, csi::KEY_VALUE),
    ] {
        assert_eq!(
            a.expect_status(cmd, None, 4096).await,
            Status::INVALID_IO_COMMAND_SET.dnr(),
            "{cmd:?}"
        );
    }
    // CNS 06h CSI 01h: KV 1.0 has no fields, all zero.
    let (c, d) = a
        .exec(identify(cns::CS_CONTROLLER, 0, csi::KEY_VALUE), None, 4096)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    assert!(d.iter().all(|&b| b == 0));

    // Commands Supported and Effects per CSI.
    let effects = |csi_: u8| {
        GetLogPageCommand {
            nsid: 0,
            lid: lid::COMMANDS_SUPPORTED_EFFECTS,
            numd: 4096 / 4 - 1,
            csi: csi_,
            ..GetLogPageCommand::default()
        }
        .to_command(0)
    };
    let (c, d) = a.exec(effects(csi::KEY_VALUE), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    let e = CommandEffectsLog::decode(&d).expect("effects");
    assert_eq!(e.io[usize::from(kvop::STORE)], effect::CSUPP | effect::LBCC);
    assert_eq!(e.io[usize::from(kvop::LIST)], effect::CSUPP);
    assert_eq!(e.io[usize::from(kvop::EXIST)], effect::CSUPP);
    let (_, d) = a.exec(effects(csi::NVM), None, 4096).await;
    let e = CommandEffectsLog::decode(&d).expect("effects");
    assert_eq!(e.io[usize::from(kvop::LIST)], 0, "no List in NVM");
    assert_eq!(e.io[usize::from(io::WRITE)], effect::CSUPP | effect::LBCC);

    // I/O Command Set Profile: index 0 is the only combination.
    let profile = |iocsci: u32| {
        SetFeatures {
            fid: fid::IO_COMMAND_SET_PROFILE,
            cdw11: iocsci,
            ..SetFeatures::default()
        }
        .to_command(0)
    };
    assert_eq!(a.expect_status(profile(0), None, 0).await, Status::SUCCESS);
    assert_eq!(
        a.expect_status(profile(1), None, 0).await,
        Status::IO_COMMAND_SET_COMBINATION_REJECTED.dnr()
    );
    let (c, _) = a
        .exec(
            GetFeatures {
                fid: fid::IO_COMMAND_SET_PROFILE,
                ..GetFeatures::default()
            }
            .to_command(0),
            None,
            0,
        )
        .await;
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 0));

    // Per-namespace stats carry the KV usage.
    let stats = t.target.stats();
    let ns = stats
        .namespaces
        .iter()
        .find(|n| n.nsid == KV_NSID)
        .expect("kv stats");
    assert_eq!(ns.csi, csi::KEY_VALUE);
    let u = ns.kv_usage.expect("usage");
    assert_eq!((u.key_count, u.used_bytes), (1, 5000));
    assert!(ns.stats.write_ops >= 1 && ns.stats.read_bytes >= 5000);
}

#[tokio::test]
async fn an_nvm_only_controller_does_not_see_kv_namespaces() {
    let t = kv_target().await;
    // CC.CSS = 000b: the NVM command set alone; the KV namespace is inactive.
    let mut a = admin_css(t.addr, Cc::CSS_NVM).await;
    let (_, d) = a
        .exec(identify(cns::ACTIVE_NS_LIST, 0, 0), None, 4096)
        .await;
    assert_eq!(&d[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    let (c, d) = a
        .exec(identify(cns::NAMESPACE, KV_NSID, 0), None, 4096)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    assert!(d.iter().all(|&b| b == 0), "inactive NSID: zero-filled");
    let mut q = Client::io_queue_of(t.addr, &a, SUBNQN, 1).await;
    assert_eq!(
        q.expect_status(exist(b"k"), None, 0).await,
        Status::INVALID_NAMESPACE.dnr()
    );
    // Creating a KV namespace needs the command set enabled.
    let create = NsMgmtCommand {
        nsid: 0,
        sel: NsMgmtCommand::SEL_CREATE,
        csi: csi::KEY_VALUE,
    }
    .to_command(0);
    let data = KvNsCreate {
        size_bytes: 1 << 20,
        ..KvNsCreate::default()
    }
    .to_create()
    .to_bytes();
    t.target.set_namespace_manager(Arc::new(KvManager));
    assert_eq!(
        a.expect_status(create, Some(&data[..]), 0).await,
        Status::IO_COMMAND_SET_NOT_ENABLED.dnr()
    );
}

#[tokio::test]
async fn store_retrieve_list_delete_exist() {
    let (t, mut a, mut q) = kv_setup().await;
    // A small value in the capsule, a 2 MiB one (the format's largest) through R2T.
    let small = pattern(100, 1);
    roundtrip(&mut q, b"obj/small", &small).await;
    let big = pattern(MAX_VALUE as usize, 2);
    let r2ts = q.r2ts_seen;
    roundtrip(&mut q, b"obj/big", &big).await;
    assert!(q.r2ts_seen > r2ts, "the 2 MiB value came through R2T");
    assert_eq!(t.kv.contents().get(&b"obj/big"[..]), Some(&big));

    // A buffer larger than the value: the value, then zeros; DW0 its size.
    let (c, back) = q.exec(retrieve(b"obj/small", 4096), None, 4096).await;
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 100));
    assert_eq!(back.len(), 4096, "the host's whole buffer is transferred");
    assert_eq!(back[..100], small[..]);
    assert!(back[100..].iter().all(|&b| b == 0), "zeros after the value");
    // Smaller: the value's first bytes, DW0 still the whole size.
    let (c, back) = q.exec(retrieve(b"obj/big", 4096), None, 4096).await;
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, MAX_VALUE));
    assert_eq!(back, big[..4096]);
    // No buffer at all: just the size.
    let (c, back) = q.exec(retrieve(b"obj/big", 0), None, 0).await;
    assert_eq!(
        (c.status, c.dw0, back.len()),
        (Status::SUCCESS, MAX_VALUE, 0)
    );

    // Store modes.
    assert_eq!(
        q.expect_status(
            store(b"obj/small", 3, StoreMode::OnlyIfAbsent),
            Some(b"xyz"),
            0
        )
        .await,
        Status::KV_KEY_EXISTS.dnr()
    );
    assert_eq!(
        q.expect_status(store(b"nope", 3, StoreMode::OnlyIfExists), Some(b"xyz"), 0)
            .await,
        Status::KV_KEY_DOES_NOT_EXIST.dnr()
    );
    assert_eq!(
        q.expect_status(
            store(b"obj/small", 3, StoreMode::OnlyIfExists),
            Some(b"xyz"),
            0
        )
        .await,
        Status::SUCCESS
    );
    assert_eq!(
        t.kv.contents().get(&b"obj/small"[..]),
        Some(&b"xyz".to_vec())
    );

    // List: from the first key, from a key, into a buffer for whole entries only.
    for k in [&b"a"[..], b"b1", b"c22"] {
        roundtrip(&mut q, k, b"v").await;
    }
    let (c, d) = q.exec(list(None, 4096), None, 4096).await;
    assert_eq!(c.status, Status::SUCCESS);
    let all: Vec<Vec<u8>> = [&b"a"[..], b"b1", b"c22", b"obj/big", b"obj/small"]
        .iter()
        .map(|k| k.to_vec())
        .collect();
    assert_eq!(list_keys(&d), all);
    let used = 4 + 4 + 4 + 8 + 12 + 12;
    assert_eq!(d.len(), 4096);
    assert!(
        d[used..].iter().all(|&b| b == 0),
        "zeros after the last entry"
    );
    let (_, d) = q.exec(list(Some(b"b"), 4096), None, 4096).await;
    assert_eq!(
        list_keys(&d),
        all[1..].to_vec(),
        "from a key that is absent"
    );
    let (_, d) = q.exec(list(Some(b"c22"), 4096), None, 4096).await;
    assert_eq!(
        list_keys(&d),
        all[2..].to_vec(),
        "inclusive of the start key"
    );
    // 4 + 4 ("a") + 4 ("b1") = 12; "c22" needs 8 more.
    let (c, d) = q.exec(list(None, 19), None, 19).await;
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(list_keys(&d), all[..2].to_vec());
    let (_, d) = q.exec(list(None, 4), None, 4).await;
    assert_eq!(d, [0, 0, 0, 0], "room for the count only");

    // Exist, Delete, then the key is gone.
    assert_eq!(
        q.expect_status(exist(b"b1"), None, 0).await,
        Status::SUCCESS
    );
    assert_eq!(
        q.expect_status(delete(b"b1"), None, 0).await,
        Status::SUCCESS
    );
    assert_eq!(
        q.expect_status(exist(b"b1"), None, 0).await,
        Status::KV_KEY_DOES_NOT_EXIST.dnr()
    );
    assert_eq!(
        q.expect_status(retrieve(b"b1", 16), None, 16).await,
        Status::KV_KEY_DOES_NOT_EXIST.dnr()
    );
    // Deleting an absent key succeeds while EDNEK is clear (the default) ...
    assert_eq!(
        q.expect_status(delete(b"b1"), None, 0).await,
        Status::SUCCESS
    );
    // ... and fails once the host sets it (Key Value Configuration, per namespace).
    let ednek = SetFeatures {
        nsid: KV_NSID,
        fid: fid::KEY_VALUE_CONFIG,
        cdw11: 1,
        ..SetFeatures::default()
    };
    assert_eq!(
        a.expect_status(ednek.to_command(0), None, 0).await,
        Status::SUCCESS
    );
    let get = GetFeatures {
        nsid: KV_NSID,
        fid: fid::KEY_VALUE_CONFIG,
        ..GetFeatures::default()
    };
    let (c, _) = a.exec(get.to_command(0), None, 0).await;
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 1));
    assert_eq!(
        q.expect_status(delete(b"b1"), None, 0).await,
        Status::KV_KEY_DOES_NOT_EXIST.dnr()
    );
    // The feature is KV specific: an NVM namespace and reserved bits are refused.
    let on_nvm = SetFeatures {
        nsid: NVM_NSID,
        ..ednek
    };
    assert_eq!(
        a.expect_status(on_nvm.to_command(0), None, 0).await,
        Status::INVALID_FIELD.dnr()
    );
    let reserved = SetFeatures { cdw11: 2, ..ednek };
    assert_eq!(
        a.expect_status(reserved.to_command(0), None, 0).await,
        Status::INVALID_FIELD.dnr()
    );
    // Flush on a KV namespace.
    assert_eq!(
        q.expect_status(Command::new(kvop::FLUSH, 0, KV_NSID), None, 0)
            .await,
        Status::SUCCESS
    );
}

/// A KV command whose CDW11 (KL, options, reserved bits) or flags are set by hand.
fn with_cdw11(mut c: Command, f: impl FnOnce(u32) -> u32) -> Command {
    c.set_cdw11(f(c.cdw11()));
    c
}

#[tokio::test]
async fn bad_input_gets_the_specified_status_and_the_connection_keeps_working() {
    let (t, _a, mut q) = kv_setup().await;
    roundtrip(&mut q, b"present", &pattern(3000, 9)).await;
    let v = pattern(64, 4);

    struct Case {
        what: &'static str,
        cmd: Command,
        write: Option<Vec<u8>>,
        read_len: usize,
        want: Status,
    }
    let case = |what, cmd, write: Option<&[u8]>, read_len, want| Case {
        what,
        cmd,
        write: write.map(<[u8]>::to_vec),
        read_len,
        want,
    };
    let cases = vec![
        case(
            "key length 0",
            with_cdw11(store(b"k", 64, StoreMode::Always), |d| d & !0xFF),
            Some(&v),
            0,
            Status::KV_INVALID_KEY_SIZE.dnr(),
        ),
        case(
            "key length 17",
            with_cdw11(retrieve(b"k", 64), |d| (d & !0xFF) | 17),
            None,
            64,
            Status::INVALID_FIELD.dnr(),
        ),
        case(
            "key length 0 on Exist",
            with_cdw11(exist(b"k"), |d| d & !0xFF),
            None,
            0,
            Status::KV_INVALID_KEY_SIZE.dnr(),
        ),
        case(
            "value size 0",
            store(b"k", 0, StoreMode::Always),
            None,
            0,
            Status::KV_INVALID_VALUE_SIZE.dnr(),
        ),
        case(
            "value size above the maximum (small data)",
            store(b"k", MAX_VALUE as usize + 1, StoreMode::Always),
            Some(&v),
            0,
            Status::KV_INVALID_VALUE_SIZE.dnr(),
        ),
        case(
            "value size and data length differ",
            store(b"k", 65, StoreMode::Always),
            Some(&v),
            0,
            Status::DATA_SGL_LENGTH_INVALID.dnr(),
        ),
        case(
            "SIKE and SINKE both",
            with_cdw11(store(b"k", 64, StoreMode::Always), |d| d | (3 << 8)),
            Some(&v),
            0,
            Status::INVALID_FIELD.dnr(),
        ),
        case(
            "reserved store option",
            with_cdw11(store(b"k", 64, StoreMode::Always), |d| d | (0x80 << 8)),
            Some(&v),
            0,
            Status::INVALID_FIELD.dnr(),
        ),
        case(
            "reserved CDW11 bits",
            with_cdw11(exist(b"k"), |d| d | (1 << 20)),
            None,
            0,
            Status::INVALID_FIELD.dnr(),
        ),
        case(
            "host buffer and data length differ",
            retrieve(b"present", 128),
            None,
            64,
            Status::DATA_SGL_LENGTH_INVALID.dnr(),
        ),
        case(
            "list buffer below the 4-byte count",
            list(None, 3),
            None,
            3,
            Status::INVALID_FIELD.dnr(),
        ),
        case(
            "list buffer of 0",
            list(None, 0),
            None,
            0,
            Status::INVALID_FIELD.dnr(),
        ),
        case(
            "key does not exist",
            retrieve(b"absent", 64),
            None,
            64,
            Status::KV_KEY_DOES_NOT_EXIST.dnr(),
        ),
        // Other command sets' commands mean what the namespace's set says.
        case(
            "KV List on an NVM namespace",
            {
                let mut c = list(None, 4096);
                c.set_nsid(NVM_NSID);
                c
            },
            None,
            4096,
            Status::INVALID_OPCODE.dnr(),
        ),
        case(
            "KV Exist on an NVM namespace",
            {
                let mut c = exist(b"k");
                c.set_nsid(NVM_NSID);
                c
            },
            None,
            0,
            Status::INVALID_OPCODE.dnr(),
        ),
        case(
            // Store is NVM Write there: CDW10-11 are its SLBA, far beyond the namespace.
            "KV Store on an NVM namespace",
            {
                let mut c = store(b"k", 512, StoreMode::Always);
                c.set_nsid(NVM_NSID);
                c
            },
            Some(&[7u8; 512][..]),
            0,
            Status::LBA_OUT_OF_RANGE.dnr(),
        ),
        case(
            // Read is Retrieve there: KL (CDW11 bits 7:0, SLBA bits 39:32) is 0.
            "NVM Read on a KV namespace",
            read_cmd(KV_NSID, 0, 8),
            None,
            4096,
            Status::KV_INVALID_KEY_SIZE.dnr(),
        ),
        case(
            "NVM Write Zeroes on a KV namespace",
            {
                let mut c = Command::new(io::WRITE_ZEROES, 0, KV_NSID);
                c.set_cdw12(7);
                c
            },
            None,
            0,
            Status::INVALID_OPCODE.dnr(),
        ),
        case(
            "fused KV command",
            {
                let mut c = exist(b"present");
                c.set_flags(1);
                c
            },
            None,
            0,
            Status::INVALID_FIELD.dnr(),
        ),
    ];
    for c in cases {
        let st = q.expect_status(c.cmd, c.write.as_deref(), c.read_len).await;
        assert_eq!(st, c.want, "{}", c.what);
        still_works(&mut q).await;
    }

    // A value above the maximum whose data does come (through R2T): Invalid Value Size.
    let over = pattern(MAX_VALUE as usize + 4096, 5);
    assert_eq!(
        q.expect_status(store(b"k", over.len(), StoreMode::Always), Some(&over), 0)
            .await,
        Status::KV_INVALID_VALUE_SIZE.dnr()
    );
    still_works(&mut q).await;
    // A host buffer above MDTS (4 MiB): Invalid Field (CDW10).
    assert_eq!(
        q.expect_status(retrieve(b"present", 8 << 20), None, 8 << 20)
            .await,
        Status::INVALID_FIELD.dnr()
    );
    still_works(&mut q).await;
    assert!(
        !t.kv.contents().contains_key(&b"k"[..]),
        "no rejected Store changed anything"
    );

    // Failures of the store itself.
    t.kv.set_fault(Some(KvBackendError::NotReady("opening".into())));
    let st = q.expect_status(retrieve(b"present", 64), None, 64).await;
    assert_eq!(st, Status::NAMESPACE_NOT_READY);
    assert!(!st.dnr, "not ready is worth a retry");
    t.kv.set_fault(Some(KvBackendError::Unrecovered("checksum".into())));
    assert_eq!(
        q.expect_status(retrieve(b"present", 64), None, 64).await,
        Status::KV_UNRECOVERED_ERROR.dnr()
    );
    t.kv.set_fault(None);
    still_works(&mut q).await;
    assert!(t.target.health().media_errors >= 1, "counted in SMART");
}

#[tokio::test]
async fn capacity_exceeded_when_the_key_limit_is_reached() {
    let (t, _a, mut q) = kv_setup().await;
    for i in 0..KV_MAX_KEYS {
        let k = format!("key{i}");
        let cid = q
            .submit(
                store(k.as_bytes(), 1, StoreMode::Always),
                Some(b"x"),
                0,
                true,
            )
            .await;
        let (c, _) = q.wait_done(cid).await;
        assert_eq!(c.status, Status::SUCCESS, "{k}");
    }
    assert_eq!(
        q.expect_status(store(b"one-more", 1, StoreMode::Always), Some(b"x"), 0)
            .await,
        Status::CAPACITY_EXCEEDED.dnr()
    );
    // Overwriting an existing key still works; so does reading.
    roundtrip(&mut q, b"key7", b"new").await;
    assert_eq!(t.kv.usage().key_count, KV_MAX_KEYS);
}

#[tokio::test]
async fn reservations_fence_stores_and_deletes_of_other_hosts() {
    let (t, _a, mut q) = kv_setup().await;
    roundtrip(&mut q, b"shared", b"v1").await;
    // Host 1 registers and takes Write Exclusive on the KV namespace.
    let mut reg = Command::new(io::RESERVATION_REGISTER, 0, KV_NSID);
    reg.set_cdw10(0);
    let mut key_data = [0u8; 16];
    key_data[8..].copy_from_slice(&0xABCDu64.to_le_bytes());
    assert_eq!(
        q.expect_status(reg, Some(&key_data), 0).await,
        Status::SUCCESS
    );
    let mut acq = Command::new(io::RESERVATION_ACQUIRE, 0, KV_NSID);
    acq.set_cdw10(1 << 8);
    let mut acq_data = [0u8; 16];
    acq_data[..8].copy_from_slice(&0xABCDu64.to_le_bytes());
    assert_eq!(
        q.expect_status(acq, Some(&acq_data), 0).await,
        Status::SUCCESS
    );
    // Host 2: reads pass, writes conflict.
    let other = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";
    let mut a2 = Client::admin_as(t.addr, SUBNQN, other, [0x99; 16]).await;
    let cc = Cc {
        en: true,
        css: Cc::CSS_ALL_IO,
        iosqes: 6,
        iocqes: 4,
        ..Cc::default()
    };
    // Re-enable with all I/O command sets (admin_as enabled NVM only).
    assert_eq!(a2.prop_set(reg::CC, 0).await, Status::SUCCESS);
    assert_eq!(
        a2.prop_set(reg::CC, u64::from(cc.to_u32())).await,
        Status::SUCCESS
    );
    let mut q2 = Client::io_queue_of(t.addr, &a2, SUBNQN, 1).await;
    let (c, back) = q2.exec(retrieve(b"shared", 2), None, 2).await;
    assert_eq!((c.status, back), (Status::SUCCESS, b"v1".to_vec()));
    assert_eq!(
        q2.expect_status(exist(b"shared"), None, 0).await,
        Status::SUCCESS
    );
    assert_eq!(
        q2.expect_status(store(b"shared", 2, StoreMode::Always), Some(b"v2"), 0)
            .await,
        Status::RESERVATION_CONFLICT.dnr()
    );
    assert_eq!(
        q2.expect_status(delete(b"shared"), None, 0).await,
        Status::RESERVATION_CONFLICT.dnr()
    );
    assert_eq!(t.kv.contents().get(&b"shared"[..]), Some(&b"v1".to_vec()));
}

/// Creates KV namespaces of `MemKvBackend`s, as the storage node does with its engine.
struct KvManager;

impl NamespaceManager for KvManager {
    fn create(&self, _: &Target, _: &str, _: &CreateNamespace) -> Result<u32, Status> {
        Err(Status::NS_INSUFFICIENT_CAPACITY.dnr())
    }
    fn create_kv(
        &self,
        target: &Target,
        subnqn: &str,
        req: &CreateKvNamespace,
    ) -> Result<u32, Status> {
        let backend = Arc::new(MemKvBackend::new(req.size_bytes, 100));
        let mut cfg = KvNamespaceConfig::new(0, backend, 4096);
        cfg.attached = false;
        target
            .add_kv_namespace(subnqn, cfg)
            .map_err(|_| Status::INTERNAL_ERROR)
    }
    fn delete(&self, target: &Target, subnqn: &str, nsid: u32) -> Result<(), Status> {
        target
            .remove_namespace(subnqn, nsid)
            .map_err(|_| Status::INVALID_NAMESPACE.dnr())
    }
    fn attach(&self, target: &Target, subnqn: &str, nsid: u32, c: &[u16]) -> Result<(), Status> {
        target.attach_namespace(subnqn, nsid, c).map(|_| ())
    }
    fn detach(&self, target: &Target, subnqn: &str, nsid: u32, c: &[u16]) -> Result<(), Status> {
        target.detach_namespace(subnqn, nsid, c).map(|_| ())
    }
}

/// A manager that knows only NVM (the default `create_kv`).
struct NvmOnlyManager;

impl NamespaceManager for NvmOnlyManager {
    fn create(&self, _: &Target, _: &str, _: &CreateNamespace) -> Result<u32, Status> {
        Err(Status::NS_INSUFFICIENT_CAPACITY.dnr())
    }
    fn delete(&self, _: &Target, _: &str, _: u32) -> Result<(), Status> {
        Ok(())
    }
    fn attach(&self, _: &Target, _: &str, _: u32, _: &[u16]) -> Result<(), Status> {
        Ok(())
    }
    fn detach(&self, _: &Target, _: &str, _: u32, _: &[u16]) -> Result<(), Status> {
        Ok(())
    }
}

#[tokio::test]
async fn namespace_management_creates_kv_namespaces() {
    let (t, mut a, _q) = kv_setup().await;
    t.target.set_namespace_manager(Arc::new(KvManager));
    let create = |csi_: u8| {
        NsMgmtCommand {
            nsid: 0,
            sel: NsMgmtCommand::SEL_CREATE,
            csi: csi_,
        }
        .to_command(0)
    };
    let data = |k: KvNsCreate| k.to_create().to_bytes();
    let good = KvNsCreate {
        size_bytes: 8 << 20,
        capacity_bytes: 8 << 20,
        ..KvNsCreate::default()
    };
    let (c, _) = a
        .exec(create(csi::KEY_VALUE), Some(&data(good)[..]), 0)
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    let nsid = c.dw0;
    assert_eq!(nsid, 3);
    // Created detached: allocated, not active; attach it to this controller.
    let (_, d) = a
        .exec(
            identify(cns::CS_ALLOCATED_NS_LIST, 0, csi::KEY_VALUE),
            None,
            4096,
        )
        .await;
    assert_eq!(&d[..12], &[2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    let mut attach = nvme_proto::identify::NsAttachCommand {
        nsid,
        sel: nvme_proto::identify::NsAttachCommand::SEL_ATTACH,
    }
    .to_command(0);
    attach.set_cdw10(0);
    let list = nvme_proto::identify::CtrlList {
        ids: vec![a.cntlid],
    }
    .to_bytes();
    assert_eq!(
        a.expect_status(attach, Some(&list[..]), 0).await,
        Status::SUCCESS
    );
    let (c, d) = a
        .exec(
            identify(cns::CS_NAMESPACE, nsid, csi::KEY_VALUE),
            None,
            4096,
        )
        .await;
    assert_eq!(c.status, Status::SUCCESS);
    let id = KvIdentifyNamespace::decode(&d).expect("05h");
    assert_eq!(id.nsze_bytes, 8 << 20);
    assert_eq!(id.formats()[0].max_value_bytes, 4096);

    // What the create data may not say.
    let bad = [
        (
            "a second KV format",
            KvNsCreate {
                format_index: 1,
                ..good
            },
            Status::INVALID_FORMAT.dnr(),
        ),
        (
            "size 0",
            KvNsCreate {
                size_bytes: 0,
                capacity_bytes: 0,
                ..good
            },
            Status::INVALID_FIELD.dnr(),
        ),
        (
            "thin provisioned",
            KvNsCreate {
                capacity_bytes: 1 << 20,
                ..good
            },
            Status::INVALID_FIELD.dnr(),
        ),
    ];
    for (what, k, want) in bad {
        assert_eq!(
            a.expect_status(create(csi::KEY_VALUE), Some(&data(k)[..]), 0)
                .await,
            want,
            "{what}"
        );
    }
    let mut dps = NsMgmtCreate::decode(&data(good)[..]).expect("create");
    dps.dps = 1;
    assert_eq!(
        a.expect_status(create(csi::KEY_VALUE), Some(&dps.to_bytes()[..]), 0)
            .await,
        Status::INVALID_FIELD.dnr(),
        "protection information"
    );
    assert_eq!(
        a.expect_status(create(csi::ZONED), Some(&data(good)[..]), 0)
            .await,
        Status::IO_COMMAND_SET_NOT_SUPPORTED.dnr()
    );
    // A manager that only knows NVM refuses KV creates with the same status.
    t.target.set_namespace_manager(Arc::new(NvmOnlyManager));
    assert_eq!(
        a.expect_status(create(csi::KEY_VALUE), Some(&data(good)[..]), 0)
            .await,
        Status::IO_COMMAND_SET_NOT_SUPPORTED.dnr()
    );
}

/// One operation of the model test.
#[derive(Clone, Debug)]
enum Op {
    Store(u8, usize, u8),
    Retrieve(u8, u32),
    Delete(u8),
    Exist(u8),
    List(Option<u8>, u32),
}

fn op_key(k: u8) -> Vec<u8> {
    // Keys of 1 to 16 bytes that sort in an order unlike their number.
    let len = usize::from(k % 16) + 1;
    (0..len)
        .map(|i| k.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

/// The mode of a Store in the model test.
fn op_mode(m: u8) -> StoreMode {
    match m % 3 {
        0 => StoreMode::Always,
        1 => StoreMode::OnlyIfExists,
        _ => StoreMode::OnlyIfAbsent,
    }
}

use proptest::prelude::*;

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..24, 1usize..20_000, any::<u8>()).prop_map(|(k, n, m)| Op::Store(k, n, m)),
        (0u8..24, 0u32..24_000).prop_map(|(k, n)| Op::Retrieve(k, n)),
        (0u8..24).prop_map(Op::Delete),
        (0u8..24).prop_map(Op::Exist),
        (proptest::option::of(0u8..24), 4u32..300).prop_map(|(k, n)| Op::List(k, n)),
    ]
}

/// Runs `ops` through the wire and through a `BTreeMap`; statuses, values, sizes and
/// listed keys must agree.
async fn run_model(ops: Vec<Op>) {
    let (_t, _a, mut q) = kv_setup().await;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Store(k, n, m) => {
                let (k, mode) = (op_key(k), op_mode(m));
                let v = pattern(n, i as u64);
                let st = q.expect_status(store(&k, n, mode), Some(&v), 0).await;
                let want = match (mode, model.contains_key(&k)) {
                    (StoreMode::OnlyIfExists, false) => Status::KV_KEY_DOES_NOT_EXIST.dnr(),
                    (StoreMode::OnlyIfAbsent, true) => Status::KV_KEY_EXISTS.dnr(),
                    _ => {
                        model.insert(k.clone(), v);
                        Status::SUCCESS
                    }
                };
                assert_eq!(st, want, "op {i}: store {k:?} {mode:?}");
            }
            Op::Retrieve(k, hbs) => {
                let k = op_key(k);
                let (c, back) = q.exec(retrieve(&k, hbs), None, hbs as usize).await;
                match model.get(&k) {
                    Some(v) => {
                        assert_eq!((c.status, c.dw0 as usize), (Status::SUCCESS, v.len()));
                        let n = v.len().min(hbs as usize);
                        assert!(back[..n] == v[..n], "op {i}: bytes");
                        assert!(back[n..].iter().all(|&b| b == 0), "op {i}: zeros after");
                    }
                    None => assert_eq!(c.status, Status::KV_KEY_DOES_NOT_EXIST.dnr()),
                }
            }
            Op::Delete(k) => {
                let k = op_key(k);
                model.remove(&k);
                assert_eq!(q.expect_status(delete(&k), None, 0).await, Status::SUCCESS);
            }
            Op::Exist(k) => {
                let k = op_key(k);
                let want = if model.contains_key(&k) {
                    Status::SUCCESS
                } else {
                    Status::KV_KEY_DOES_NOT_EXIST.dnr()
                };
                assert_eq!(q.expect_status(exist(&k), None, 0).await, want, "op {i}");
            }
            Op::List(start, hbs) => {
                let start = start.map(op_key);
                let (c, d) = q
                    .exec(list(start.as_deref(), hbs), None, hbs as usize)
                    .await;
                assert_eq!(c.status, Status::SUCCESS);
                let mut want = Vec::new();
                let mut used = 4;
                let from = start.clone().unwrap_or_default();
                for k in model.range(from..).map(|(k, _)| k) {
                    used += (2 + k.len()).div_ceil(4) * 4;
                    if used > hbs as usize {
                        break;
                    }
                    want.push(k.clone());
                }
                assert_eq!(list_keys(&d), want, "op {i}: list from {start:?} in {hbs}");
            }
        }
    }
    // Every value, at the end.
    for (k, v) in &model {
        let (c, back) = q.exec(retrieve(k, v.len() as u32), None, v.len()).await;
        assert_eq!(c.status, Status::SUCCESS);
        assert!(back == *v);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn wire_agrees_with_a_btreemap(ops in proptest::collection::vec(any_op(), 1..60)) {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(run_model(ops));
    }
}
