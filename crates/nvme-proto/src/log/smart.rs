//! SMART / Health Information log page (LID 0x02), 512 bytes (NVMe Base 2.0
//! "SMART / Health Information"; Linux `struct nvme_smart_log`).

use crate::bytes::{le16, le32, le128, put_bytes, put16, put32, put128};
use crate::error::DecodeError;

/// Byte offsets of the SMART / health fields.
pub mod off {
    pub const CRITICAL_WARNING: usize = 0;
    pub const COMPOSITE_TEMPERATURE: usize = 1;
    pub const AVAILABLE_SPARE: usize = 3;
    pub const AVAILABLE_SPARE_THRESHOLD: usize = 4;
    pub const PERCENTAGE_USED: usize = 5;
    pub const ENDURANCE_GROUP_CRITICAL_WARNING: usize = 6;
    pub const DATA_UNITS_READ: usize = 32;
    pub const DATA_UNITS_WRITTEN: usize = 48;
    pub const HOST_READ_COMMANDS: usize = 64;
    pub const HOST_WRITE_COMMANDS: usize = 80;
    pub const CONTROLLER_BUSY_TIME: usize = 96;
    pub const POWER_CYCLES: usize = 112;
    pub const POWER_ON_HOURS: usize = 128;
    pub const UNSAFE_SHUTDOWNS: usize = 144;
    pub const MEDIA_ERRORS: usize = 160;
    pub const NUM_ERR_LOG_ENTRIES: usize = 176;
    pub const WARNING_TEMP_TIME: usize = 192;
    pub const CRITICAL_TEMP_TIME: usize = 196;
    pub const TEMP_SENSORS: usize = 200;
    pub const THM_TEMP1_TRANSITIONS: usize = 216;
    pub const THM_TEMP2_TRANSITIONS: usize = 220;
    pub const THM_TEMP1_TOTAL_TIME: usize = 224;
    pub const THM_TEMP2_TOTAL_TIME: usize = 228;
}

/// Critical warning bits (byte 0).
pub mod critical_warning {
    pub const SPARE_BELOW_THRESHOLD: u8 = 1 << 0;
    pub const TEMPERATURE: u8 = 1 << 1;
    pub const RELIABILITY_DEGRADED: u8 = 1 << 2;
    pub const READ_ONLY: u8 = 1 << 3;
    pub const VOLATILE_BACKUP_FAILED: u8 = 1 << 4;
    pub const PMR_READ_ONLY: u8 = 1 << 5;
}

/// The SMART / health log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    pub critical_warning: u8,
    /// Composite temperature in kelvin.
    pub composite_temperature_k: u16,
    /// Available spare, percent.
    pub available_spare_pct: u8,
    pub available_spare_threshold_pct: u8,
    /// Estimate of life used, percent (may exceed 100).
    pub percentage_used: u8,
    pub endurance_group_critical_warning: u8,
    /// In thousands of 512-byte units, rounded up: see [`SmartLog::data_units`].
    pub data_units_read: u128,
    pub data_units_written: u128,
    pub host_read_commands: u128,
    pub host_write_commands: u128,
    /// Minutes the controller was busy with I/O commands.
    pub controller_busy_time_min: u128,
    pub power_cycles: u128,
    pub power_on_hours: u128,
    pub unsafe_shutdowns: u128,
    /// Unrecovered data integrity errors.
    pub media_errors: u128,
    /// Error information log entries over the life of the controller.
    pub num_err_log_entries: u128,
    pub warning_temp_time_min: u32,
    pub critical_temp_time_min: u32,
    /// Temperature sensors 1..8 in kelvin, 0 = not implemented.
    pub temp_sensors_k: [u16; 8],
    pub thm_temp1_transitions: u32,
    pub thm_temp2_transitions: u32,
    pub thm_temp1_total_time_s: u32,
    pub thm_temp2_total_time_s: u32,
}

impl SmartLog {
    pub const BYTES: usize = 512;

    /// Data units for `bytes` transferred: thousands of 512-byte units, rounded up
    /// (1 means 1 to 1000 units of 512 bytes).
    pub const fn data_units(bytes: u128) -> u128 {
        bytes.div_ceil(512 * 1000)
    }

    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        use off::*;
        put_bytes(b, CRITICAL_WARNING, &[self.critical_warning]);
        put16(b, COMPOSITE_TEMPERATURE, self.composite_temperature_k);
        put_bytes(
            b,
            AVAILABLE_SPARE,
            &[
                self.available_spare_pct,
                self.available_spare_threshold_pct,
                self.percentage_used,
                self.endurance_group_critical_warning,
            ],
        );
        put128(b, DATA_UNITS_READ, self.data_units_read);
        put128(b, DATA_UNITS_WRITTEN, self.data_units_written);
        put128(b, HOST_READ_COMMANDS, self.host_read_commands);
        put128(b, HOST_WRITE_COMMANDS, self.host_write_commands);
        put128(b, CONTROLLER_BUSY_TIME, self.controller_busy_time_min);
        put128(b, POWER_CYCLES, self.power_cycles);
        put128(b, POWER_ON_HOURS, self.power_on_hours);
        put128(b, UNSAFE_SHUTDOWNS, self.unsafe_shutdowns);
        put128(b, MEDIA_ERRORS, self.media_errors);
        put128(b, NUM_ERR_LOG_ENTRIES, self.num_err_log_entries);
        put32(b, WARNING_TEMP_TIME, self.warning_temp_time_min);
        put32(b, CRITICAL_TEMP_TIME, self.critical_temp_time_min);
        for (i, t) in self.temp_sensors_k.iter().enumerate() {
            put16(b, TEMP_SENSORS + 2 * i, *t);
        }
        put32(b, THM_TEMP1_TRANSITIONS, self.thm_temp1_transitions);
        put32(b, THM_TEMP2_TRANSITIONS, self.thm_temp2_transitions);
        put32(b, THM_TEMP1_TOTAL_TIME, self.thm_temp1_total_time_s);
        put32(b, THM_TEMP2_TOTAL_TIME, self.thm_temp2_total_time_s);
    }

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        self.encode(&mut b);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "SMART / health log",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        use off::*;
        let mut temp_sensors_k = [0u16; 8];
        for (i, t) in temp_sensors_k.iter_mut().enumerate() {
            *t = le16(b, TEMP_SENSORS + 2 * i);
        }
        Ok(SmartLog {
            critical_warning: b[CRITICAL_WARNING],
            composite_temperature_k: le16(b, COMPOSITE_TEMPERATURE),
            available_spare_pct: b[AVAILABLE_SPARE],
            available_spare_threshold_pct: b[AVAILABLE_SPARE_THRESHOLD],
            percentage_used: b[PERCENTAGE_USED],
            endurance_group_critical_warning: b[ENDURANCE_GROUP_CRITICAL_WARNING],
            data_units_read: le128(b, DATA_UNITS_READ),
            data_units_written: le128(b, DATA_UNITS_WRITTEN),
            host_read_commands: le128(b, HOST_READ_COMMANDS),
            host_write_commands: le128(b, HOST_WRITE_COMMANDS),
            controller_busy_time_min: le128(b, CONTROLLER_BUSY_TIME),
            power_cycles: le128(b, POWER_CYCLES),
            power_on_hours: le128(b, POWER_ON_HOURS),
            unsafe_shutdowns: le128(b, UNSAFE_SHUTDOWNS),
            media_errors: le128(b, MEDIA_ERRORS),
            num_err_log_entries: le128(b, NUM_ERR_LOG_ENTRIES),
            warning_temp_time_min: le32(b, WARNING_TEMP_TIME),
            critical_temp_time_min: le32(b, CRITICAL_TEMP_TIME),
            temp_sensors_k,
            thm_temp1_transitions: le32(b, THM_TEMP1_TRANSITIONS),
            thm_temp2_transitions: le32(b, THM_TEMP2_TRANSITIONS),
            thm_temp1_total_time_s: le32(b, THM_TEMP1_TOTAL_TIME),
            thm_temp2_total_time_s: le32(b, THM_TEMP2_TOTAL_TIME),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let s = SmartLog {
            critical_warning: critical_warning::READ_ONLY,
            composite_temperature_k: 273 + 40,
            available_spare_pct: 100,
            available_spare_threshold_pct: 10,
            percentage_used: 3,
            data_units_read: SmartLog::data_units(512 * 1000 + 1),
            data_units_written: 0x3030,
            host_read_commands: 0x4040,
            host_write_commands: 0x5050,
            controller_busy_time_min: 0x6060,
            power_cycles: 0x7070,
            power_on_hours: 0x8080,
            unsafe_shutdowns: 0x9090,
            media_errors: 0xA0A0,
            num_err_log_entries: 0xB0B0,
            warning_temp_time_min: 0xC0C0,
            critical_temp_time_min: 0xC4C4,
            temp_sensors_k: [300, 301, 0, 0, 0, 0, 0, 307],
            thm_temp1_transitions: 0xD8D8,
            ..Default::default()
        };
        let b = s.to_bytes();
        assert_eq!(b[0], 0x08);
        assert_eq!(&b[1..3], &313u16.to_le_bytes());
        assert_eq!(&b[3..6], &[100, 10, 3]);
        assert_eq!(b[32], 2);
        let at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        assert_eq!(at(48), 0x3030);
        assert_eq!(at(64), 0x4040);
        assert_eq!(at(80), 0x5050);
        assert_eq!(at(96), 0x6060);
        assert_eq!(at(112), 0x7070);
        assert_eq!(at(128), 0x8080);
        assert_eq!(at(144), 0x9090);
        assert_eq!(at(160), 0xA0A0);
        assert_eq!(at(176), 0xB0B0);
        assert_eq!(at(192), 0xC0C0);
        assert_eq!(at(196), 0xC4C4);
        assert_eq!(at(200), 300);
        assert_eq!(at(214), 307);
        assert_eq!(at(216), 0xD8D8);
        assert!(b[232..].iter().all(|&x| x == 0));
        assert_eq!(SmartLog::decode(&b).unwrap(), s);
    }

    #[test]
    fn data_units_round_up() {
        assert_eq!(SmartLog::data_units(0), 0);
        assert_eq!(SmartLog::data_units(1), 1);
        assert_eq!(SmartLog::data_units(512_000), 1);
        assert_eq!(SmartLog::data_units(512_001), 2);
    }

    proptest! {
        #[test]
        fn stable(b in proptest::collection::vec(any::<u8>(), 512)) {
            let s = SmartLog::decode(&b).unwrap();
            let e = s.to_bytes();
            prop_assert_eq!(SmartLog::decode(&e).unwrap(), s);
            // Every defined byte survives; only reserved ones are zeroed.
            prop_assert_eq!(&e[..7], &b[..7]);
            prop_assert_eq!(&e[32..232], &b[32..232]);
        }
    }
}
