//! A remote NVMe Key Value namespace as the bench's [`KvTarget`].

use blockdev::IoBuf;
use nvmf_host::{AnyKvNamespace, KvError, StoreMode};

use super::{KvOpError, KvTarget};

fn op_error(e: KvError) -> KvOpError {
    match e {
        KvError::KeyNotFound => KvOpError::NotFound,
        e => KvOpError::Failed(e.to_string()),
    }
}

impl KvTarget for AnyKvNamespace {
    fn max_value_bytes(&self) -> u64 {
        u64::from(self.info().max_value_bytes)
    }

    async fn store(&self, key: &[u8], value: IoBuf) -> (Result<(), KvOpError>, IoBuf) {
        let (r, b) = AnyKvNamespace::store(self, key, value, StoreMode::Always).await;
        (r.map_err(op_error), b)
    }

    async fn retrieve(&self, key: &[u8], buf: IoBuf) -> (Result<u32, KvOpError>, IoBuf) {
        let (r, b) = AnyKvNamespace::retrieve(self, key, buf).await;
        (r.map_err(op_error), b)
    }
}
