//! Entry point for fuzzing command handling: one connection fed from a byte string over an
//! in-memory stream, against a target with one small RAM namespace.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{NamespaceConfig, SubsystemConfig, Target, TargetConfig};

/// Subsystem NQN the fuzz target exports (namespace 1, 1 MiB of RAM, any host).
pub const FUZZ_SUBNQN: &str = "nqn.2026-01.io.ferrobay:fuzz";

/// Feeds `bytes` as everything a host sends on one connection, then closes the host's
/// sending side and drains the target's answers. Must never panic or hang. Returns how
/// many bytes the target sent back.
///
/// cargo-fuzz target:
/// `fuzz_target!(|data: &[u8]| { nvmf_target::fuzz_one_connection(data); });`
pub fn fuzz_one_connection(bytes: &[u8]) -> usize {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 0;
    };
    rt.block_on(async {
        let Ok(target) = Target::new(TargetConfig::default()) else {
            return 0;
        };
        if target
            .add_subsystem(SubsystemConfig::new(FUZZ_SUBNQN))
            .is_err()
        {
            return 0;
        }
        let dev = Arc::new(blockdev::RamDevice::new("fuzz0", 1 << 20));
        let _ = target.add_namespace(FUZZ_SUBNQN, NamespaceConfig::whole_device(1, dev));
        let (mut host, ctrl) = tokio::io::duplex(256 << 10);
        let local = SocketAddr::from(([127, 0, 0, 1], 4420));
        let t = target.clone();
        let server = tokio::spawn(async move { t.serve_stream(ctrl, local).await });
        let input = bytes.to_vec();
        let run = async move {
            let (mut rd, mut wr) = tokio::io::split(&mut host);
            let writer = async {
                let _ = wr.write_all(&input).await;
                let _ = wr.shutdown().await;
            };
            let reader = async {
                let mut sink = vec![0u8; 64 << 10];
                let mut total = 0;
                while let Ok(n) = rd.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                total
            };
            tokio::join!(writer, reader).1
        };
        let got = tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .unwrap_or(0);
        target.shutdown(Duration::from_secs(1)).await;
        let _ = tokio::time::timeout(Duration::from_secs(1), server).await;
        got
    })
}
