use proptest::prelude::*;
use uuid::Uuid;

use super::codec::{self, DecodeError, HEADER_BYTES};
use super::crashsim::CrashFs;
use super::*;

/// A small but complete state with fixed identifiers (the fixed test vector).
pub(crate) fn sample_state() -> NodeState {
    let drive_uuid = Uuid::from_u128(0x11111111_2222_4333_8444_555555555555);
    let nqn = "nqn.2026-01.io.ferrobay:n1:d0".to_string();
    NodeState {
        node_name: "n1".into(),
        node_uuid: Uuid::from_u128(0x0123_4567_89ab_4def_8123_4567_89ab_cdef),
        next_serial_seq: 3,
        drives: vec![DriveRecord {
            name: "d0".into(),
            spec: "ram:1G".into(),
            uuid: drive_uuid,
            size_bytes: 1 << 30,
            block_size_bytes: 512,
            serial: "FD0123456789AB0001".into(),
        }],
        subsystems: vec![SubsystemRecord {
            nqn: nqn.clone(),
            serial: "FB0123456789AB0002".into(),
            model: "Ferrobay storage node".into(),
            drive_uuid,
            allow_any_host: false,
            allowed_hosts: vec!["nqn.2014-08.org.nvmexpress:uuid:host-a".into()],
            dhchap: Vec::new(),
            tls_psks: Vec::new(),
        }],
        namespaces: vec![NamespaceRecord {
            subsystem_nqn: nqn,
            nsid: 1,
            drive_uuid,
            size_bytes: 3 << 20,
            extents: vec![
                Extent {
                    offset_bytes: 0,
                    len_bytes: 1 << 20,
                },
                Extent {
                    offset_bytes: 4 << 20,
                    len_bytes: 2 << 20,
                },
            ],
            block_size_bytes: 512,
            nguid: [0xa5; 16],
            eui64: [1, 2, 3, 4, 5, 6, 7, 8],
            uuid: Uuid::from_u128(0xfeed_0000_0000_4000_8000_0000_0000_0001),
            attachment: Attachment::Hosts(vec!["nqn.2014-08.org.nvmexpress:uuid:host-a".into()]),
            created_unix_ms: 1_767_225_600_000,
            reservation: ReservationState {
                generation: 4,
                registrants: vec![Registrant {
                    host_id: 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10,
                    key: u64::MAX,
                }],
                holder_host_id: Some(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10),
                rtype: 1,
                persist_through_power_loss: true,
            },
            kind: NamespaceKind::Nvm,
        }],
        smart: SmartCounters {
            power_cycles: 5,
            power_on_seconds: 3600,
            unsafe_shutdowns: 1,
            clean_shutdown: false,
        },
        qos: Vec::new(),
    }
}

/// The sample state plus a Key Value namespace (the fixed v2 vector).
pub(crate) fn sample_state_v2() -> NodeState {
    let mut s = sample_state();
    let mut kv = s.namespaces[0].clone();
    kv.nsid = 2;
    kv.size_bytes = 8 << 20;
    kv.extents = vec![Extent {
        offset_bytes: 8 << 20,
        len_bytes: 8 << 20,
    }];
    kv.block_size_bytes = 512;
    kv.nguid = [0x5a; 16];
    kv.eui64 = [8, 7, 6, 5, 4, 3, 2, 1];
    kv.uuid = Uuid::from_u128(0xfeed_0000_0000_4000_8000_0000_0000_0002);
    kv.attachment = Attachment::All;
    kv.reservation = ReservationState::default();
    kv.kind = NamespaceKind::Kv(KvParams {
        max_value_bytes: 2 << 20,
        max_keys: 1024,
        segment_bytes: 5 << 20,
    });
    s.namespaces.push(kv);
    s
}

/// The v2 sample plus QoS limits: per namespace with a minimum, per host on a namespace
/// with bursts, per host on the whole subsystem (the fixed v3 vector).
pub(crate) fn sample_state_v3() -> NodeState {
    let mut s = sample_state_v2();
    let nqn = s.subsystems[0].nqn.clone();
    let host = "nqn.2014-08.org.nvmexpress:uuid:host-a".to_string();
    s.qos = vec![
        QosRecord {
            subsystem_nqn: nqn.clone(),
            nsid: Some(1),
            max_iops: Some(20_000),
            min_iops: Some(5_000),
            min_bytes_per_s: Some(100 << 20),
            ..QosRecord::default()
        },
        QosRecord {
            subsystem_nqn: nqn.clone(),
            nsid: Some(2),
            host_nqn: Some(host.clone()),
            max_iops: Some(1000),
            max_bytes_per_s: Some(50 << 20),
            burst_ios: Some(10),
            burst_bytes: Some(1 << 20),
            ..QosRecord::default()
        },
        QosRecord {
            subsystem_nqn: nqn,
            host_nqn: Some(host),
            max_bytes_per_s: Some(200 << 20),
            ..QosRecord::default()
        },
    ];
    s
}

fn with_gen(mut s: NodeState, n: u64) -> NodeState {
    s.smart.power_cycles = n;
    s
}

/// Patches the version field and re-seals the checksum.
fn reseal_with_version(mut bytes: Vec<u8>, version: u32) -> Vec<u8> {
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..28]), &bytes[HEADER_BYTES..]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn roundtrip() {
    let s = sample_state();
    let bytes = codec::encode(&s, 42).unwrap();
    let d = codec::decode(&bytes).unwrap();
    assert_eq!(d.generation, 42);
    assert_eq!(d.state, s);
}

/// The committed v1 vector (written by the version 1 program) must decode forever:
/// its namespaces are NVM namespaces.
#[test]
fn fixed_vector_v1() {
    let vector = include_bytes!("../../tests/data/node-state-v1.bin");
    assert_eq!(&vector[8..12], &1u32.to_le_bytes(), "a version 1 file");
    let body = std::str::from_utf8(&vector[HEADER_BYTES..]).unwrap();
    assert!(
        !body.contains("\"kind\""),
        "version 1 knew no namespace kinds"
    );
    let d = codec::decode(vector).expect("v1 vector decodes");
    assert_eq!(d.generation, 7);
    assert_eq!(d.state, sample_state());
    assert_eq!(d.state.namespaces[0].kind, NamespaceKind::Nvm);
    assert_eq!(&vector[..8], b"FBNODEST");
}

/// The committed v2 vector (with a Key Value namespace, written by the version 2 program)
/// must decode forever: no QoS limits.
#[test]
fn fixed_vector_v2() {
    let vector = include_bytes!("../../tests/data/node-state-v2.bin");
    assert_eq!(&vector[8..12], &2u32.to_le_bytes(), "a version 2 file");
    let body = std::str::from_utf8(&vector[HEADER_BYTES..]).unwrap();
    assert!(!body.contains("\"qos\""), "version 2 knew no QoS");
    let d = codec::decode(vector).expect("v2 vector decodes");
    assert_eq!(d.generation, 7);
    assert_eq!(d.state, sample_state_v2());
    assert!(d.state.qos.is_empty());
}

/// The committed v3 vector (with QoS limits, written by the version 3 program) must
/// decode forever; a state without DH-HMAC-CHAP hosts still encodes to the same body.
#[test]
fn fixed_vector_v3() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/node-state-v3.bin");
    let encoded = reseal_with_version(codec::encode(&sample_state_v3(), 7).unwrap(), 3);
    let vector = std::fs::read(&path).unwrap();
    assert_eq!(&vector[8..12], &3u32.to_le_bytes(), "a version 3 file");
    let d = codec::decode(&vector).expect("v3 vector decodes");
    assert_eq!(d.generation, 7);
    assert_eq!(d.state, sample_state_v3());
    let body = std::str::from_utf8(&vector[HEADER_BYTES..]).unwrap();
    assert!(body.contains("\"kind\": \"nvm\""), "{body}");
    assert!(body.contains("\"min_iops\": 5000"), "{body}");
    assert!(body.contains("\"nsid\": null"), "{body}");
    assert_eq!(encoded, vector, "encoder drifted");
}

/// The v3 sample plus a host that must authenticate with DH-HMAC-CHAP (the fixed v4 vector).
pub(crate) fn sample_state_v4() -> NodeState {
    let mut s = sample_state_v3();
    s.subsystems[0].dhchap = vec![DhchapHostRecord {
        host_nqn: "nqn.2014-08.org.nvmexpress:uuid:host-a".into(),
        secret: "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:".into(),
        ctrl_secret: None,
        hashes: vec!["hmac(sha256)".into()],
        dhgroups: vec!["ffdhe2048".into(), "null".into()],
        concat: false,
    }];
    s
}

/// The committed v4 vector (with a DH-HMAC-CHAP host, written by the version 4 program)
/// must decode forever; a state without TLS PSK hosts still encodes to the same body.
#[test]
fn fixed_vector_v4() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/node-state-v4.bin");
    let encoded = reseal_with_version(codec::encode(&sample_state_v4(), 8).unwrap(), 4);
    let vector = std::fs::read(&path).unwrap();
    assert_eq!(&vector[8..12], &4u32.to_le_bytes(), "a version 4 file");
    let d = codec::decode(&vector).expect("v4 vector decodes");
    assert_eq!(d.generation, 8);
    assert_eq!(d.state, sample_state_v4());
    let body = std::str::from_utf8(&vector[HEADER_BYTES..]).unwrap();
    assert!(body.contains("\"dhchap\""), "{body}");
    assert_eq!(encoded, vector, "encoder drifted");
    // Debug output never shows the secret.
    let dbg = format!("{:?}", d.state);
    assert!(!dbg.contains("DHHC-1"), "{dbg}");
}

/// The v4 sample plus a host that must connect over TLS (the fixed v5 vector).
pub(crate) fn sample_state_v5() -> NodeState {
    let mut s = sample_state_v4();
    s.subsystems[0].tls_psks = vec![TlsPskHostRecord {
        host_nqn: "nqn.2014-08.org.nvmexpress:uuid:host-a".into(),
        psk: "NVMeTLSkey-1:01:ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJmqu8zd7v8qDMNU:".into(),
    }];
    s
}

/// The committed v5 vector (with a TLS PSK host, written by the version 5 program) must
/// decode forever; a state without concatenating hosts still encodes to the same body.
#[test]
fn fixed_vector_v5() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/node-state-v5.bin");
    let encoded = reseal_with_version(codec::encode(&sample_state_v5(), 9).unwrap(), 5);
    let vector = std::fs::read(&path).unwrap();
    assert_eq!(&vector[8..12], &5u32.to_le_bytes(), "a version 5 file");
    let d = codec::decode(&vector).expect("v5 vector decodes");
    assert_eq!(d.generation, 9);
    assert_eq!(d.state, sample_state_v5());
    let body = std::str::from_utf8(&vector[HEADER_BYTES..]).unwrap();
    assert!(body.contains("\"tls_psks\""), "{body}");
    assert_eq!(encoded, vector, "encoder drifted");
    let dbg = format!("{:?}", d.state);
    assert!(!dbg.contains("NVMeTLSkey"), "Debug shows no PSK: {dbg}");
}

/// The v5 sample plus a host that must use secure channel concatenation (the fixed v6
/// vector).
pub(crate) fn sample_state_v6() -> NodeState {
    let mut s = sample_state_v5();
    s.subsystems[0].dhchap.push(DhchapHostRecord {
        host_nqn: "nqn.2014-08.org.nvmexpress:uuid:host-b".into(),
        secret: "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:".into(),
        ctrl_secret: None,
        hashes: vec![],
        dhgroups: vec![],
        concat: true,
    });
    s
}

/// The committed v6 vector (with a concatenating host) must decode forever, and the
/// encoder must keep writing exactly it. Regenerate after a deliberate format change with
/// `FERROBAY_WRITE_STATE_VECTOR=1 cargo test -p storage-node fixed_vector_v6`.
#[test]
fn fixed_vector_v6() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/node-state-v6.bin");
    let encoded = codec::encode(&sample_state_v6(), 10).unwrap();
    if std::env::var_os("FERROBAY_WRITE_STATE_VECTOR").is_some() {
        std::fs::write(&path, &encoded).unwrap();
    }
    let vector = std::fs::read(&path).unwrap();
    assert_eq!(&vector[8..12], &6u32.to_le_bytes(), "a version 6 file");
    let d = codec::decode(&vector).expect("v6 vector decodes");
    assert_eq!(d.generation, 10);
    assert_eq!(d.state, sample_state_v6());
    let body = std::str::from_utf8(&vector[HEADER_BYTES..]).unwrap();
    assert!(body.contains("\"concat\": true"), "{body}");
    assert_eq!(encoded, vector, "encoder drifted");
}

/// A version 5 file cannot hold concatenating hosts (a v5 program would let them do I/O
/// over plain TCP).
#[test]
fn version_5_with_concat_hosts_is_corrupt() {
    let bytes = reseal_with_version(codec::encode(&sample_state_v6(), 1).unwrap(), 5);
    match codec::decode(&bytes) {
        Err(DecodeError::Body(why)) => assert_eq!(
            why,
            "a version 5 state holds secure channel concatenation hosts"
        ),
        other => panic!("{other:?}"),
    }
}

/// A version 4 file cannot hold TLS PSK hosts (a v4 program would let them in over plain
/// TCP); a bad PSK is a corrupt state.
#[test]
fn version_4_with_tls_hosts_is_corrupt() {
    let bytes = reseal_with_version(codec::encode(&sample_state_v5(), 1).unwrap(), 4);
    match codec::decode(&bytes) {
        Err(DecodeError::Body(why)) => assert_eq!(why, "a version 4 state holds TLS PSK hosts"),
        other => panic!("{other:?}"),
    }
    let mut s = sample_state_v5();
    s.subsystems[0].tls_psks[0].psk = "NVMeTLSkey-1:01:AAAA:".into();
    let err = s.validate().unwrap_err();
    assert!(err.contains("TLS PSK of host"), "{err}");
    assert!(!err.contains("AAAA"), "{err}");
}

/// A version 3 file cannot hold DH-HMAC-CHAP hosts (a v3 program would let them in
/// unauthenticated); a bad secret is a corrupt state.
#[test]
fn version_3_with_dhchap_hosts_is_corrupt() {
    let bytes = reseal_with_version(codec::encode(&sample_state_v4(), 1).unwrap(), 3);
    match codec::decode(&bytes) {
        Err(DecodeError::Body(why)) => {
            assert_eq!(why, "a version 3 state holds DH-HMAC-CHAP hosts")
        }
        other => panic!("{other:?}"),
    }
    let mut s = sample_state_v4();
    s.subsystems[0].dhchap[0].secret = "DHHC-1:01:AAAA:".into();
    let err = s.validate().unwrap_err();
    assert!(err.contains("DH-HMAC-CHAP secret of host"), "{err}");
    assert!(!err.contains("AAAA"), "{err}");
}

/// A version 2 file cannot hold QoS limits (a v2 program would drop them).
#[test]
fn version_2_with_qos_limits_is_corrupt() {
    let bytes = reseal_with_version(codec::encode(&sample_state_v3(), 1).unwrap(), 2);
    match codec::decode(&bytes) {
        Err(DecodeError::Body(why)) => assert_eq!(why, "a version 2 state holds QoS limits"),
        other => panic!("{other:?}"),
    }
    let bytes = reseal_with_version(codec::encode(&sample_state_v2(), 1).unwrap(), 2);
    assert!(
        codec::decode(&bytes).is_ok(),
        "the same body without limits is fine"
    );
}

/// QoS records must name what exists, limit something, and not repeat a key.
#[test]
fn inconsistent_qos_records_are_corrupt() {
    let broken = |f: &dyn Fn(&mut NodeState)| {
        let mut s = sample_state_v3();
        f(&mut s);
        s.validate().unwrap_err()
    };
    assert!(broken(&|s| s.qos[0].subsystem_nqn = "nqn.x:y".into()).contains("unknown subsystem"));
    assert!(broken(&|s| s.qos[0].nsid = Some(9)).contains("unknown namespace"));
    assert!(
        broken(&|s| {
            s.qos[2] = QosRecord {
                subsystem_nqn: s.qos[2].subsystem_nqn.clone(),
                ..QosRecord::default()
            }
        })
        .contains("no limit")
    );
    assert!(
        broken(&|s| {
            let dup = s.qos[1].clone();
            s.qos.push(dup)
        })
        .contains("appear twice")
    );
    sample_state_v3().validate().unwrap();
}

/// A version 1 file cannot name a KV namespace (v1 programs would read it as blocks).
#[test]
fn version_1_with_a_kv_namespace_is_corrupt() {
    let bytes = reseal_with_version(codec::encode(&sample_state_v2(), 1).unwrap(), 1);
    assert!(matches!(codec::decode(&bytes), Err(DecodeError::Body(_))));
    // The same body as version 2 is fine.
    assert!(codec::decode(&codec::encode(&sample_state_v2(), 1).unwrap()).is_ok());
}

#[test]
fn identifiers_are_hex_in_the_body() {
    let bytes = codec::encode(&sample_state(), 1).unwrap();
    let body = std::str::from_utf8(&bytes[HEADER_BYTES..]).unwrap();
    assert!(body.contains("\"nguid\": \"a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5\""));
    assert!(body.contains("\"eui64\": \"0102030405060708\""));
    assert!(body.contains("\"host_id\": \"0102030405060708090a0b0c0d0e0f10\""));
}

#[test]
fn every_single_bit_flip_and_truncation_is_refused() {
    let bytes = codec::encode(&sample_state(), 1).unwrap();
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= bit;
            assert!(codec::decode(&b).is_err(), "flip at {i} accepted");
        }
    }
    for len in 0..bytes.len() {
        assert!(
            codec::decode(&bytes[..len]).is_err(),
            "truncation to {len} accepted"
        );
    }
    let mut longer = bytes.clone();
    longer.push(b' ');
    assert!(matches!(
        codec::decode(&longer),
        Err(DecodeError::Length { .. })
    ));
}

#[test]
fn newer_version_is_refused_clearly() {
    let bytes = reseal_with_version(codec::encode(&sample_state(), 1).unwrap(), 7);
    let err = codec::decode(&bytes).unwrap_err();
    assert!(err.is_newer());
    assert_eq!(
        err.to_string(),
        "format version 7 is newer than this program supports (6); upgrade ferrobay"
    );
    let bytes = reseal_with_version(codec::encode(&sample_state(), 1).unwrap(), 0);
    assert_eq!(
        codec::decode(&bytes).unwrap_err(),
        DecodeError::UnknownVersion(0)
    );
}

#[test]
fn inconsistent_body_is_corrupt() {
    let mut s = sample_state();
    s.namespaces[0].subsystem_nqn = "nqn.other".into();
    assert!(matches!(
        StateFile::new(CrashFs::new()).save(&s),
        Err(StateError::Invalid(_))
    ));
    let mut s = sample_state();
    s.namespaces[0].size_bytes = 4 << 20; // larger than its extents
    assert!(s.validate().is_err());
}

fn saved(states: &[NodeState]) -> CrashFs {
    let mut f = StateFile::new(CrashFs::new());
    for s in states {
        f.save(s).unwrap();
    }
    let mut fs = f.store().clone();
    fs.ops = 0;
    fs
}

#[test]
fn load_empty_dir_is_none() {
    assert!(StateFile::new(CrashFs::new()).load().unwrap().is_none());
}

#[test]
fn corrupt_current_falls_back_to_previous() {
    let (s1, s2) = (with_gen(sample_state(), 1), with_gen(sample_state(), 2));
    let mut fs = saved(&[s1.clone(), s2.clone()]);
    let mut bytes = fs.read(CURRENT_FILE).unwrap().unwrap();
    bytes[HEADER_BYTES + 10] ^= 1;
    fs.write(CURRENT_FILE, &bytes).unwrap();
    let mut f = StateFile::new(fs);
    let loaded = f.load().unwrap().unwrap();
    assert_eq!(loaded.state, s1);
    assert_eq!(loaded.generation, 1);
    assert!(
        matches!(&loaded.source, LoadSource::Previous { reason } if reason.contains("checksum")),
        "{:?}",
        loaded.source
    );
    // The next save continues from the loaded generation and repairs the current file.
    f.save(&s2).unwrap();
    assert_eq!(f.generation(), 2);
    let again = StateFile::new(f.store().clone()).load().unwrap().unwrap();
    assert_eq!((again.state, again.source), (s2, LoadSource::Current));
}

#[test]
fn both_corrupt_is_an_error_naming_both_files() {
    let mut fs = saved(&[sample_state(), sample_state()]);
    fs.write(CURRENT_FILE, b"garbage").unwrap();
    fs.write(PREVIOUS_FILE, &[b'x'; 40]).unwrap();
    let err = StateFile::new(fs).load().unwrap_err().to_string();
    assert!(
        err.starts_with("no usable node state: mem:node-state: "),
        "{err}"
    );
    assert!(err.contains("mem:node-state.prev: bad magic"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn corrupt_current_without_previous_is_an_error_not_a_fresh_start() {
    let mut fs = saved(&[sample_state()]);
    fs.write(CURRENT_FILE, b"").unwrap();
    assert!(matches!(
        StateFile::new(fs).load(),
        Err(StateError::Corrupt { .. })
    ));
}

#[test]
fn newer_current_is_never_skipped() {
    let mut fs = saved(&[sample_state(), sample_state()]);
    let bytes = fs.read(CURRENT_FILE).unwrap().unwrap();
    fs.write(CURRENT_FILE, &reseal_with_version(bytes, 9))
        .unwrap();
    let err = StateFile::new(fs).load().unwrap_err();
    assert!(matches!(err, StateError::Newer { .. }));
    assert!(
        err.to_string().contains("format version 9 is newer"),
        "{err}"
    );
}

/// Loads a crash image and checks it holds one of `allowed` (or nothing, if allowed).
fn check_image(
    img: CrashFs,
    allowed: &[&NodeState],
    none_ok: bool,
    what: &str,
) -> StateFile<CrashFs> {
    let mut f = StateFile::new(img);
    match f.load() {
        Ok(Some(l)) => assert!(allowed.contains(&&l.state), "{what}: loaded a third state"),
        Ok(None) => assert!(none_ok, "{what}: state vanished"),
        Err(e) => panic!("{what}: load failed: {e}"),
    }
    f
}

/// Crash at every step of an update, with every way the unsynced data and directory
/// entries could land: load always yields the old or the new state, and the node can
/// save again afterwards.
#[test]
fn crash_at_every_step_of_an_update_leaves_old_or_new() {
    let (s0, old, new, next) = (
        with_gen(sample_state(), 10),
        with_gen(sample_state(), 11),
        with_gen(sample_state(), 12),
        with_gen(sample_state(), 13),
    );
    let mut images_checked = 0;
    for history in [vec![], vec![old.clone()], vec![s0.clone(), old.clone()]] {
        let none_ok = history.is_empty();
        let base = saved(&history);
        let mut step = 0;
        loop {
            let mut fs = base.clone();
            fs.crash_after(step);
            let mut f = StateFile::new(fs);
            if !history.is_empty() {
                f.load().unwrap();
            }
            let finished = f.save(&new).is_ok();
            for (k, img) in f.store().crash_images().into_iter().enumerate() {
                let what = format!("history {} step {step} image {k}", history.len());
                let mut g = check_image(img, &[&old, &new], none_ok, &what);
                // Recovery: the next update goes through and is what loads.
                g.save(&next)
                    .unwrap_or_else(|e| panic!("{what}: save after crash: {e}"));
                let after = StateFile::new(g.store().clone()).load().unwrap().unwrap();
                assert_eq!(after.state, next, "{what}");
                images_checked += 1;
            }
            if finished {
                break;
            }
            step += 1;
        }
        assert!(step >= 4, "update protocol has {step} steps");
    }
    eprintln!("{images_checked} crash images checked");
    assert!(images_checked >= 50, "only {images_checked} crash images");
}

#[test]
fn fs_store_real_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = StateFile::new(FsStore::new(dir.path()));
    assert!(f.load().unwrap().is_none());
    let (a, b) = (with_gen(sample_state(), 1), with_gen(sample_state(), 2));
    f.save(&a).unwrap();
    f.save(&b).unwrap();
    assert!(dir.path().join(PREVIOUS_FILE).exists());
    assert!(!dir.path().join(TEMP_FILE).exists());
    let l = StateFile::new(FsStore::new(dir.path()))
        .load()
        .unwrap()
        .unwrap();
    assert_eq!((l.state, l.generation), (b, 2));
    // Corrupt the current file on disk: the previous generation comes back.
    let p = dir.path().join(CURRENT_FILE);
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 0xff;
    std::fs::write(&p, &bytes).unwrap();
    let l = StateFile::new(FsStore::new(dir.path()))
        .load()
        .unwrap()
        .unwrap();
    assert_eq!(l.state, a);
    assert!(matches!(l.source, LoadSource::Previous { .. }));
}

#[test]
fn data_dir_lock_is_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let held = DataDirLock::acquire(dir.path()).unwrap();
    let err = DataDirLock::acquire(dir.path())
        .err()
        .expect("second lock refused");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
    drop(held);
    DataDirLock::acquire(dir.path()).unwrap();
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = codec::decode(&bytes);
    }

    #[test]
    fn decode_never_panics_on_valid_header_with_random_body(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut bytes = codec::encode(&sample_state(), 1).unwrap();
        bytes.truncate(HEADER_BYTES);
        bytes[24..28].copy_from_slice(&(body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&body);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..28]), &bytes[HEADER_BYTES..]);
        bytes[28..32].copy_from_slice(&crc.to_le_bytes());
        prop_assert!(codec::decode(&bytes).is_err());
    }

    #[test]
    fn counters_and_ids_roundtrip(
        cycles in any::<u64>(), secs in any::<u64>(), host in any::<u128>(), key in any::<u64>(),
        nguid in any::<[u8; 16]>(), eui in any::<[u8; 8]>(), gen_ in any::<u64>(),
    ) {
        let mut s = sample_state();
        s.smart.power_cycles = cycles;
        s.smart.power_on_seconds = secs;
        s.namespaces[0].reservation.registrants[0].host_id = host;
        s.namespaces[0].reservation.registrants[0].key = key;
        s.namespaces[0].nguid = nguid;
        s.namespaces[0].eui64 = eui;
        let d = codec::decode(&codec::encode(&s, gen_).unwrap()).unwrap();
        prop_assert_eq!(d.generation, gen_);
        prop_assert_eq!(d.state, s);
    }
}
