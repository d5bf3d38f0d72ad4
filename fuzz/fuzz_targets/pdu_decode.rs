//! Arbitrary bytes through every decoder of nvme-proto: the NVMe/TCP PDU framing
//! (common header, layout, PSH decode, digests) and every data structure decoder.
//! Nothing may panic; where an encoder exists, decode(encode(x)) == x for every x that
//! decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvme_proto::command::Command;
use nvme_proto::completion::Completion;
use nvme_proto::dsm::{Compare, DsmCommand, DsmRange, WriteZeroes};
use nvme_proto::fabrics::{
    self, ConnectCommand, ConnectData, Disconnect, PropertyGet, PropertySet,
};
use nvme_proto::features::{
    AerEvent, GetFeatures, IoCommandSetProfile, KvConfig, NumberOfQueues, SetFeatures,
};
use nvme_proto::identify::{
    CtrlList, IdentifyCommand, IdentifyController, IdentifyNamespace, IdentifyNsIndependent,
    IoCommandSetCombinations, NsAttachCommand, NsIdDescriptorList, NsList, NsMgmtCommand,
    NsMgmtCreate,
};
use nvme_proto::kv::{
    KvCommand, KvIdentifyController, KvIdentifyNamespace, KvListData, KvNsCreate, encode_list,
};
use nvme_proto::log::{
    AnaLog, ChangedNsList, CommandEffectsLog, DiscoveryLog, DiscoveryLogEntry, DiscoveryLogHeader,
    ErrorInfoEntry, FirmwareSlotLog, GetLogPageCommand, ReservationNotificationLog, SmartLog,
    log_page_range,
};
use nvme_proto::reservation::{
    AcquireData, RegisterData, ReleaseData, ReservationAcquire, ReservationRegister,
    ReservationRelease, ReservationReport, ReservationStatus, ReservationStatusHeader,
};
use nvme_proto::tcp::{
    self, CH_BYTES, CommonHeader, Digests, Framing, PduHeader, check_header_digest, data_digest,
    encode_header,
};

fuzz_target!(|input: &[u8]| {
    pdu(input);
    structures(input);
});

/// Frames `input` as a PDU the way a connection reader does.
fn pdu(input: &[u8]) {
    let Some(ch_bytes) = input.get(..CH_BYTES) else {
        return;
    };
    let mut a = [0u8; CH_BYTES];
    a.copy_from_slice(ch_bytes);
    let ch = CommonHeader::decode(&a);
    // Before ICReq, and with the digests the header's own flags claim (so that the
    // digest paths are reached), and with a small data limit.
    for (digests, max_data) in [
        (None, 1 << 20),
        (Some(Digests::from_bits(ch.flags)), 1 << 20),
        (Some(Digests::default()), 4096),
    ] {
        let Ok(l) = tcp::layout(&ch, digests, max_data) else {
            continue;
        };
        assert!(l.data_offset + l.data_len <= l.total_len);
        let _ = l.pad_len();
        let _ = l.header_rest_len();
        let Ok(h) = PduHeader::decode(&ch, input) else {
            continue;
        };
        if l.has_hdgst {
            let _ = check_header_digest(input, l.hlen);
        }
        let data = input.get(l.data_offset..l.data_offset + l.data_len);
        if let (true, Some(d)) = (l.has_ddgst, data) {
            let _ = data_digest(d) == input.get(l.data_offset + l.data_len..).unwrap_or(&[])[..];
        }
        header_roundtrip(&h);
        match &h {
            PduHeader::CapsuleCmd(c) => command(c),
            PduHeader::CapsuleResp(r) => {
                assert_eq!(Completion::decode(&r.encode()), *r);
                let _ = AerEvent::from_dw0(r.dw0);
                let _ = fabrics::ConnectResponse::from_dw0(r.dw0);
                let _ = fabrics::InvalidParameter::from_dw0(r.dw0);
            }
            _ => {}
        }
        if let Some(d) = data {
            structures(d);
        }
    }
}

/// decode(encode(h)) == h for a decoded header.
fn header_roundtrip(h: &PduHeader) {
    let e = encode_header(h, 0, 0, Framing::default());
    let b = e.as_bytes();
    let mut a = [0u8; CH_BYTES];
    a.copy_from_slice(&b[..CH_BYTES]);
    let ch = CommonHeader::decode(&a);
    assert_eq!(PduHeader::decode(&ch, b).as_ref(), Ok(h));
}

/// Every command parser, and from_command(to_command(x)) == x.
fn command(c: &Command) {
    let _ = c.sgl1().tcp_location();
    let cid = c.cid();
    let nsid = c.nsid();
    let x = ConnectCommand::from_command(c);
    assert_eq!(ConnectCommand::from_command(&x.to_command(cid)), x);
    let x = Disconnect::from_command(c);
    assert_eq!(Disconnect::from_command(&x.to_command(cid)), x);
    if let Ok(x) = PropertyGet::from_command(c) {
        assert_eq!(PropertyGet::from_command(&x.to_command(cid)), Ok(x));
        let _ = x.completion(cid, c.mptr());
    }
    if let Ok(x) = PropertySet::from_command(c) {
        assert_eq!(PropertySet::from_command(&x.to_command(cid)), Ok(x));
        let _ = fabrics::Cc::from_u32(x.value as u32).to_u32();
        let _ = fabrics::Cap::from_u64(x.value).to_u64();
    }
    let x = IdentifyCommand::from_command(c);
    assert_eq!(IdentifyCommand::from_command(&x.to_command(cid)), x);
    let x = GetLogPageCommand::from_command(c);
    assert_eq!(GetLogPageCommand::from_command(&x.to_command(cid)), x);
    let _ = x.len_bytes();
    let x = GetFeatures::from_command(c);
    assert_eq!(GetFeatures::from_command(&x.to_command(cid)), x);
    let x = SetFeatures::from_command(c);
    assert_eq!(SetFeatures::from_command(&x.to_command(cid)), x);
    let q = NumberOfQueues::from_dw(x.cdw11);
    let _ = (q.is_valid_request(), q.grant(64));
    if let Ok(p) = IoCommandSetProfile::from_cdw11(x.cdw11) {
        assert_eq!(IoCommandSetProfile::from_cdw11(p.to_dw()), Ok(p));
    }
    if let Ok(k) = KvConfig::from_cdw11(x.cdw11) {
        assert_eq!(KvConfig::from_cdw11(k.to_dw()), Ok(k));
    }
    match KvCommand::decode(c) {
        Ok(x) => {
            assert_eq!(KvCommand::decode(&x.to_command(cid, nsid)), Ok(x));
            let _ = (x.direction(), x.data_len_bytes(), x.key());
        }
        // Every rejection carries DNR and points inside the SQE.
        Err(e) => assert!(e.status.dnr && usize::from(e.sqe_byte) < 64),
    }
    let x = NsMgmtCommand::from_command(c);
    assert_eq!(NsMgmtCommand::from_command(&x.to_command(cid)), x);
    let x = NsAttachCommand::from_command(c);
    assert_eq!(NsAttachCommand::from_command(&x.to_command(cid)), x);
    let x = ReservationRegister::from_command(c);
    assert_eq!(
        ReservationRegister::from_command(&x.to_command(cid, nsid)),
        x
    );
    let x = ReservationAcquire::from_command(c);
    assert_eq!(
        ReservationAcquire::from_command(&x.to_command(cid, nsid)),
        x
    );
    let x = ReservationRelease::from_command(c);
    assert_eq!(
        ReservationRelease::from_command(&x.to_command(cid, nsid)),
        x
    );
    let x = ReservationReport::from_command(c);
    assert_eq!(ReservationReport::from_command(&x.to_command(cid, nsid)), x);
    let x = DsmCommand::from_command(c);
    assert_eq!(DsmCommand::from_command(&x.to_command(cid, nsid)), x);
    let x = WriteZeroes::from_command(c);
    assert_eq!(WriteZeroes::from_command(&x.to_command(cid, nsid)), x);
    let x = Compare::from_command(c);
    assert_eq!(Compare::from_command(&x.to_command(cid, nsid)), x);
}

/// Checks decode(encode(x)) == x for a value that decoded.
macro_rules! stable {
    ($ty:ty, $b:expr) => {
        if let Ok(x) = <$ty>::decode($b) {
            let e = x.to_bytes();
            assert_eq!(<$ty>::decode(&e[..]).as_ref(), Ok(&x), stringify!($ty));
        }
    };
}

/// Every data structure decoder on `b`.
fn structures(b: &[u8]) {
    stable!(ConnectData, b);
    stable!(IdentifyController, b);
    stable!(IdentifyNamespace, b);
    stable!(NsIdDescriptorList, b);
    stable!(NsList, b);
    stable!(CtrlList, b);
    stable!(NsMgmtCreate, b);
    stable!(IdentifyNsIndependent, b);
    stable!(IoCommandSetCombinations, b);
    stable!(KvIdentifyNamespace, b);
    stable!(KvIdentifyController, b);
    if let Ok(c) = NsMgmtCreate::decode(b) {
        if let Ok(k) = KvNsCreate::from_create(&c) {
            assert_eq!(KvNsCreate::from_create(&k.to_create()), Ok(k));
        }
    }
    // KV List data: every key the checked parser hands out re-encodes to the same list
    // (3 spare bytes for the last entry's padding, which the input may cut off).
    if let Ok(l) = KvListData::parse(b) {
        let keys = l.to_vec();
        assert_eq!(keys.len(), l.count() as usize);
        let again = encode_list(&keys, b.len() + 3);
        assert_eq!(KvListData::parse(&again).map(|l| l.to_vec()), Ok(keys));
    }
    stable!(ErrorInfoEntry, b);
    stable!(SmartLog, b);
    stable!(FirmwareSlotLog, b);
    stable!(ChangedNsList, b);
    stable!(CommandEffectsLog, b);
    stable!(ReservationNotificationLog, b);
    stable!(AnaLog, b);
    stable!(DiscoveryLog, b);
    stable!(DiscoveryLogEntry, b);
    stable!(RegisterData, b);
    stable!(AcquireData, b);
    stable!(ReleaseData, b);
    stable!(DsmRange, b);
    if let Ok(h) = DiscoveryLogHeader::decode(b) {
        let mut e = [0u8; DiscoveryLogHeader::BYTES];
        h.encode(&mut e);
        assert_eq!(DiscoveryLogHeader::decode(&e), Ok(h));
    }
    let _ = ErrorInfoEntry::decode_page(b);
    let _ = ReservationStatusHeader::decode(b);
    for ext in [false, true] {
        if let Ok(s) = ReservationStatus::decode(b, ext) {
            assert_eq!(ReservationStatus::decode(&s.to_bytes(ext), ext), Ok(s));
        }
    }
    if let Some(&n) = b.first() {
        let count = n as usize + 1;
        if let Ok(r) = DsmRange::decode_list(&b[1..], count) {
            assert_eq!(
                DsmRange::decode_list(&DsmRange::encode_list(&r), count),
                Ok(r)
            );
        }
    }
    // Partial log page reads at an offset taken from the input.
    if b.len() >= 12 {
        let off = u64::from_le_bytes(b[..8].try_into().unwrap_or_default()) % 8192;
        let len = u32::from_le_bytes(b[8..12].try_into().unwrap_or_default()) as u64;
        if let Ok(r) = log_page_range(&b[12..], off, len) {
            assert_eq!(r.len_bytes(), len);
        }
    }
    if let Ok(s) = std::str::from_utf8(b) {
        let _ = fabrics::validate_nqn(s);
    }
}
