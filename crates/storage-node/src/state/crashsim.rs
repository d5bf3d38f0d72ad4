//! A crash-recording in-memory [`StateStore`] for tests: it can stop (crash) after any
//! number of mutating operations and enumerate every directory and file image a power loss
//! at that instant could leave behind.

use std::collections::BTreeMap;
use std::io;

use super::StateStore;

#[derive(Clone, Debug)]
struct Inode {
    /// Content as of the last `sync_file`; `None` if never synced.
    durable: Option<Vec<u8>>,
    volatile: Vec<u8>,
}

#[derive(Clone, Debug)]
enum DirOp {
    Link { name: String, inode: usize },
    Rename { from: String, to: String },
}

/// How an unsynced file's content lands in a crash image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Landing {
    Durable,
    Volatile,
    TornHalf,
    BitFlip,
}

const LANDINGS: [Landing; 4] = [
    Landing::Durable,
    Landing::Volatile,
    Landing::TornHalf,
    Landing::BitFlip,
];

#[derive(Clone, Debug, Default)]
pub struct CrashFs {
    inodes: Vec<Inode>,
    dir: BTreeMap<String, usize>,
    durable_dir: BTreeMap<String, usize>,
    /// Directory operations since the last `sync_dir`, in order.
    pending: Vec<DirOp>,
    /// Mutating operations still allowed before the simulated crash; `None` = unlimited.
    budget: Option<usize>,
    /// Mutating operations performed so far.
    pub ops: usize,
}

fn crashed() -> io::Error {
    io::Error::other("simulated crash")
}

impl CrashFs {
    pub fn new() -> CrashFs {
        CrashFs::default()
    }

    /// Allows `n` more mutating operations, then fails every further one.
    pub fn crash_after(&mut self, n: usize) {
        self.budget = Some(n);
    }

    fn spend(&mut self) -> io::Result<()> {
        match &mut self.budget {
            Some(0) => Err(crashed()),
            Some(n) => {
                *n -= 1;
                self.ops += 1;
                Ok(())
            }
            None => {
                self.ops += 1;
                Ok(())
            }
        }
    }

    /// Every image a power loss now could leave: each subset of the unsynced directory
    /// operations (applied in order where still possible) times each landing of each
    /// reachable file whose content is not durable.
    pub fn crash_images(&self) -> Vec<CrashFs> {
        let mut out = Vec::new();
        let n_ops = self.pending.len();
        for mask in 0u32..(1 << n_ops) {
            let mut dir = self.durable_dir.clone();
            for (i, op) in self.pending.iter().enumerate() {
                if mask & (1 << i) == 0 {
                    continue;
                }
                match op {
                    DirOp::Link { name, inode } => {
                        dir.insert(name.clone(), *inode);
                    }
                    DirOp::Rename { from, to } => {
                        if let Some(ino) = dir.remove(from) {
                            dir.insert(to.clone(), ino);
                        }
                    }
                }
            }
            let mut reachable: Vec<usize> = dir.values().copied().collect();
            reachable.sort_unstable();
            reachable.dedup();
            let unsettled: Vec<usize> = reachable
                .into_iter()
                .filter(|&i| self.inodes[i].durable.as_ref() != Some(&self.inodes[i].volatile))
                .collect();
            let combos = LANDINGS.len().pow(unsettled.len() as u32);
            for mut c in 0..combos {
                let mut inodes = self.inodes.clone();
                for &ino in &unsettled {
                    let landing = LANDINGS[c % LANDINGS.len()];
                    c /= LANDINGS.len();
                    let node = &self.inodes[ino];
                    let content = match landing {
                        Landing::Durable => node.durable.clone().unwrap_or_default(),
                        Landing::Volatile => node.volatile.clone(),
                        Landing::TornHalf => node.volatile[..node.volatile.len() / 2].to_vec(),
                        Landing::BitFlip => {
                            let mut v = node.volatile.clone();
                            if let Some(b) = v.get_mut(node.volatile.len() / 3) {
                                *b ^= 0x10;
                            }
                            v
                        }
                    };
                    inodes[ino] = Inode {
                        durable: Some(content.clone()),
                        volatile: content,
                    };
                }
                out.push(CrashFs {
                    inodes,
                    dir: dir.clone(),
                    durable_dir: dir.clone(),
                    pending: Vec::new(),
                    budget: None,
                    ops: 0,
                });
            }
        }
        out
    }
}

impl StateStore for CrashFs {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.dir.get(name).map(|&i| self.inodes[i].volatile.clone()))
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        Ok(self.dir.contains_key(name))
    }

    fn write(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        self.spend()?;
        match self.dir.get(name) {
            Some(&i) => self.inodes[i].volatile = data.to_vec(),
            None => {
                self.inodes.push(Inode {
                    durable: None,
                    volatile: data.to_vec(),
                });
                let inode = self.inodes.len() - 1;
                self.dir.insert(name.to_string(), inode);
                self.pending.push(DirOp::Link {
                    name: name.to_string(),
                    inode,
                });
            }
        }
        Ok(())
    }

    fn sync_file(&mut self, name: &str) -> io::Result<()> {
        self.spend()?;
        let &i = self
            .dir
            .get(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        self.inodes[i].durable = Some(self.inodes[i].volatile.clone());
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        self.spend()?;
        let i = self
            .dir
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        self.dir.insert(to.to_string(), i);
        self.pending.push(DirOp::Rename {
            from: from.to_string(),
            to: to.to_string(),
        });
        Ok(())
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        self.spend()?;
        self.durable_dir = self.dir.clone();
        self.pending.clear();
        Ok(())
    }

    fn describe(&self, name: &str) -> String {
        format!("mem:{name}")
    }
}
