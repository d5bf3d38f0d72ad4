//! Why assembly refuses a volume: which members count, which do not and why, and whether
//! forcing out-of-date members in would let it start. Every layer that knows more about
//! the members (the local registry knows the device specs, a processor node the member
//! URLs) fills in what it knows before the report reaches a person.

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::layout::LayoutParams;

/// One layout slot as assembly found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotReport {
    pub index: usize,
    pub uuid: Uuid,
    /// The device found for the slot, or where it was expected (a spec, a URL).
    pub device: Option<String>,
    /// Present and current: it counts toward the layout.
    pub current: bool,
    /// Why it does not count ("no device", "failed by the operator", ...).
    pub problem: Option<String>,
    /// Present but out of date (it left the volume fully current): forcing would count it.
    pub forceable: bool,
}

/// Too few current members to start a volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortfall {
    pub name: String,
    pub layout: LayoutParams,
    /// Every slot, in order.
    pub slots: Vec<SlotReport>,
    /// Counting the forceable members as current would let the volume start.
    pub force_helps: bool,
}

impl Shortfall {
    /// Slots that do not count.
    pub fn lost(&self) -> usize {
        self.slots.iter().filter(|s| !s.current).count()
    }

    /// The slots that would be counted as current by forcing, as "member 2" or
    /// "members 2, 3".
    pub fn forceable_members(&self) -> String {
        let list = self.forceable_list();
        if list.contains(',') {
            format!("members {list}")
        } else {
            format!("member {list}")
        }
    }

    /// The slots that would be counted as current by forcing, as "2, 3".
    pub fn forceable_list(&self) -> String {
        let v: Vec<String> = self
            .slots
            .iter()
            .filter(|s| s.forceable)
            .map(|s| s.index.to_string())
            .collect();
        v.join(", ")
    }
}

fn slot_text(s: &SlotReport) -> String {
    let mut t = s.index.to_string();
    if let Some(d) = &s.device {
        t += &format!(" {d}");
    }
    if let Some(p) = &s.problem {
        t += &format!(" ({p})");
    }
    t
}

/// "2 of 4 members are missing or out of date, raid5 survives 1 (present: 0 /a, 1 /b;
/// not counted: 2 /c (no device), 3 /d (failed by the operator))".
impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let present: Vec<String> = self
            .slots
            .iter()
            .filter(|s| s.current)
            .map(slot_text)
            .collect();
        let lost: Vec<String> = self
            .slots
            .iter()
            .filter(|s| !s.current)
            .map(slot_text)
            .collect();
        write!(
            f,
            "{} of {} members are missing or out of date, {} survives {} (present: {}; not counted: {})",
            self.lost(),
            self.slots.len(),
            self.layout.level_name(),
            self.layout.tolerance(),
            if present.is_empty() {
                "none".to_string()
            } else {
                present.join(", ")
            },
            lost.join(", ")
        )
    }
}
