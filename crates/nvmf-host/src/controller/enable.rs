//! Enabling and shutting down a controller through CC/CSTS.

use std::time::{Duration, Instant};

use nvme_proto::fabrics::{Cap, Cc, Csts, PropertySize, reg};

use super::fabrics::{property_get, property_set};
use crate::error::{HostError, Result};
use crate::queue::QueuePair;

/// The CC value this host writes to enable: 64-byte SQEs, 16-byte CQEs, 4 KiB pages, and
/// the command set selection CAP.CSS allows.
pub(crate) fn enable_cc(cap: &Cap) -> Cc {
    let css = if cap.css & Cap::CSS_IO_COMMAND_SETS != 0 {
        Cc::CSS_ALL_IO
    } else if cap.css & Cap::CSS_NVM == 0 && cap.css & Cap::CSS_NO_IO != 0 {
        Cc::CSS_ADMIN_ONLY
    } else {
        Cc::CSS_NVM
    };
    Cc {
        en: true,
        css,
        mps: 0,
        ams: 0,
        shn: Cc::SHN_NONE,
        iosqes: 6,
        iocqes: 4,
        crime: false,
    }
}

/// Writes CC.EN = 1 and waits for CSTS.RDY within CAP.TO.
pub(crate) async fn enable(admin: &QueuePair, cap: &Cap) -> Result<()> {
    let cc = enable_cc(cap);
    property_set(admin, reg::CC, PropertySize::Four, u64::from(cc.to_u32())).await?;
    let timeout = Duration::from_millis((u64::from(cap.to_500ms) + 1) * 500);
    wait_csts(admin, timeout, "CSTS.RDY after CC.EN = 1 (CAP.TO)", |c| {
        c.rdy
    })
    .await
}

/// Normal shutdown: CC.SHN = 01b, then wait for CSTS.SHST = complete.
pub(crate) async fn shutdown(admin: &QueuePair, timeout: Duration) -> Result<()> {
    let cc = property_get(admin, reg::CC, PropertySize::Four).await? as u32;
    let cc = Cc {
        shn: Cc::SHN_NORMAL,
        ..Cc::from_u32(cc)
    };
    property_set(admin, reg::CC, PropertySize::Four, u64::from(cc.to_u32())).await?;
    wait_csts(admin, timeout, "CSTS.SHST = complete after CC.SHN", |c| {
        c.shst == Csts::SHST_COMPLETE
    })
    .await
}

/// Polls CSTS until `done` holds, with growing pauses (1 ms .. 100 ms).
async fn wait_csts(
    admin: &QueuePair,
    timeout: Duration,
    what: &str,
    done: impl Fn(&Csts) -> bool,
) -> Result<()> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let csts = Csts::from_u32(property_get(admin, reg::CSTS, PropertySize::Four).await? as u32);
        if done(&csts) {
            return Ok(());
        }
        if csts.cfs {
            return Err(HostError::invalid(
                format!("controller at {}", admin.addr()),
                format!("controller fatal status (CSTS.CFS) while waiting for {what}"),
            ));
        }
        if start.elapsed() >= timeout {
            return Err(HostError::invalid(
                format!("controller at {}", admin.addr()),
                format!("no {what} within {} ms", timeout.as_millis()),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc_values() {
        let nvm = Cap {
            css: Cap::CSS_NVM,
            ..Cap::default()
        };
        assert_eq!(enable_cc(&nvm).to_u32(), 0x0046_0001);
        let csi = Cap {
            css: Cap::CSS_NVM | Cap::CSS_IO_COMMAND_SETS,
            ..Cap::default()
        };
        assert_eq!(enable_cc(&csi).css, Cc::CSS_ALL_IO);
        let disc = Cap {
            css: Cap::CSS_NO_IO,
            ..Cap::default()
        };
        assert_eq!(enable_cc(&disc).css, Cc::CSS_ADMIN_ONLY);
    }
}
