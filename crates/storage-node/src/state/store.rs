//! Atomic, power-loss-safe updates of the state file, over a small file-system seam.
//!
//! Update protocol (see `docs/node-state.md`):
//! 1. write the new generation to `node-state.tmp`, fsync it;
//! 2. if `node-state` exists, rename it to `node-state.prev` (the fallback generation);
//! 3. rename `node-state.tmp` to `node-state`;
//! 4. fsync the directory.
//!
//! Whatever subset of steps 2-4 reached the disk before a crash, `node-state` or
//! `node-state.prev` holds the old or the new generation, complete and fsynced.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::NodeState;
use super::codec::{self, DecodeError};

pub const CURRENT_FILE: &str = "node-state";
pub const PREVIOUS_FILE: &str = "node-state.prev";
pub const TEMP_FILE: &str = "node-state.tmp";
pub const LOCK_FILE: &str = "node.lock";

/// The file operations the update protocol needs, so tests can record them and simulate a
/// crash between any two. Names are plain file names inside one directory.
pub trait StateStore: Send {
    /// The whole file, or `None` if it does not exist.
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    fn exists(&self, name: &str) -> io::Result<bool>;
    /// Creates or truncates `name` and writes `data` (not yet durable).
    fn write(&mut self, name: &str, data: &[u8]) -> io::Result<()>;
    /// Makes the content of `name` durable.
    fn sync_file(&mut self, name: &str) -> io::Result<()>;
    /// Atomically replaces `to` with `from`.
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames) durable.
    fn sync_dir(&mut self) -> io::Result<()>;
    /// A human-readable location for messages.
    fn describe(&self, name: &str) -> String;
}

impl<T: StateStore + ?Sized> StateStore for Box<T> {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        (**self).read(name)
    }
    fn exists(&self, name: &str) -> io::Result<bool> {
        (**self).exists(name)
    }
    fn write(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        (**self).write(name, data)
    }
    fn sync_file(&mut self, name: &str) -> io::Result<()> {
        (**self).sync_file(name)
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        (**self).rename(from, to)
    }
    fn sync_dir(&mut self) -> io::Result<()> {
        (**self).sync_dir()
    }
    fn describe(&self, name: &str) -> String {
        (**self).describe(name)
    }
}

/// The real store: files in the node's data directory.
pub struct FsStore {
    dir: PathBuf,
}

impl FsStore {
    pub fn new(dir: impl Into<PathBuf>) -> FsStore {
        FsStore { dir: dir.into() }
    }
}

impl StateStore for FsStore {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.dir.join(name)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn exists(&self, name: &str) -> io::Result<bool> {
        self.dir.join(name).try_exists()
    }

    fn write(&mut self, name: &str, data: &[u8]) -> io::Result<()> {
        let mut f = File::create(self.dir.join(name))?;
        f.write_all(data)
    }

    fn sync_file(&mut self, name: &str) -> io::Result<()> {
        OpenOptions::new()
            .read(true)
            .open(self.dir.join(name))?
            .sync_all()
    }

    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn sync_dir(&mut self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }

    fn describe(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// Why the state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{op} {file}: {source}")]
    Io {
        op: &'static str,
        file: String,
        source: io::Error,
    },
    /// Written by a newer ferrobay: never fall back past it, that would roll state back.
    #[error("{file}: {source}")]
    Newer { file: String, source: DecodeError },
    #[error("no usable node state: {current_file}: {current}; {previous_file}: {previous}")]
    Corrupt {
        current_file: String,
        current: String,
        previous_file: String,
        previous: String,
    },
    #[error("cannot encode node state: {0}")]
    Encode(String),
    #[error("node state is invalid: {0}")]
    Invalid(String),
    #[error("data dir {dir} is in use by another process (lock {lock} held)")]
    Locked { dir: String, lock: String },
}

/// Where a loaded state came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadSource {
    Current,
    /// The current file was missing or corrupt (the reason); the previous generation was used.
    Previous {
        reason: String,
    },
}

/// A successfully loaded state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub state: NodeState,
    pub generation: u64,
    pub source: LoadSource,
}

/// The state file of one node over a [`StateStore`].
pub struct StateFile<S: StateStore> {
    store: S,
    /// Generation of the last state loaded or saved; the next save writes this + 1.
    generation: u64,
}

impl<S: StateStore> StateFile<S> {
    pub fn new(store: S) -> StateFile<S> {
        StateFile {
            store,
            generation: 0,
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Loads the newest intact generation. `Ok(None)` only when neither the current nor
    /// the previous file exists (a node that never saved). A corrupt current file falls
    /// back to an intact previous one (reported in [`Loaded::source`]); a file from a
    /// newer format version is an error, never skipped.
    pub fn load(&mut self) -> Result<Option<Loaded>, StateError> {
        let current = self.read_one(CURRENT_FILE)?;
        let current_missing = current.is_none();
        let current_reason = match current {
            Some(Ok(d)) => {
                self.generation = d.generation;
                return Ok(Some(Loaded {
                    state: d.state,
                    generation: d.generation,
                    source: LoadSource::Current,
                }));
            }
            Some(Err(e)) if e.is_newer() => {
                return Err(StateError::Newer {
                    file: self.store.describe(CURRENT_FILE),
                    source: e,
                });
            }
            Some(Err(e)) => e.to_string(),
            None => "missing".to_string(),
        };
        match self.read_one(PREVIOUS_FILE)? {
            Some(Ok(d)) => {
                self.generation = d.generation;
                Ok(Some(Loaded {
                    state: d.state,
                    generation: d.generation,
                    source: LoadSource::Previous {
                        reason: current_reason,
                    },
                }))
            }
            Some(Err(e)) if e.is_newer() => Err(StateError::Newer {
                file: self.store.describe(PREVIOUS_FILE),
                source: e,
            }),
            None if current_missing => Ok(None),
            prev => Err(StateError::Corrupt {
                current_file: self.store.describe(CURRENT_FILE),
                current: current_reason,
                previous_file: self.store.describe(PREVIOUS_FILE),
                previous: match prev {
                    Some(Err(e)) => e.to_string(),
                    _ => "missing".to_string(),
                },
            }),
        }
    }

    fn read_one(
        &self,
        name: &str,
    ) -> Result<Option<Result<codec::Decoded, DecodeError>>, StateError> {
        let bytes = self.store.read(name).map_err(|source| StateError::Io {
            op: "read",
            file: self.store.describe(name),
            source,
        })?;
        Ok(bytes.map(|b| codec::decode(&b)))
    }

    /// Saves `state` as the next generation with the atomic update protocol. On error the
    /// on-disk state is the old or the new one; the in-memory generation is not advanced.
    pub fn save(&mut self, state: &NodeState) -> Result<(), StateError> {
        state.validate().map_err(StateError::Invalid)?;
        let generation = self.generation + 1;
        let bytes = codec::encode(state, generation).map_err(StateError::Encode)?;
        let io = |op: &'static str, file: &str, store: &S| {
            let file = store.describe(file);
            move |source| StateError::Io { op, file, source }
        };
        self.store
            .write(TEMP_FILE, &bytes)
            .map_err(io("write", TEMP_FILE, &self.store))?;
        self.store
            .sync_file(TEMP_FILE)
            .map_err(io("fsync", TEMP_FILE, &self.store))?;
        if self
            .store
            .exists(CURRENT_FILE)
            .map_err(io("stat", CURRENT_FILE, &self.store))?
        {
            self.store.rename(CURRENT_FILE, PREVIOUS_FILE).map_err(io(
                "rename",
                CURRENT_FILE,
                &self.store,
            ))?;
        }
        self.store
            .rename(TEMP_FILE, CURRENT_FILE)
            .map_err(io("rename", TEMP_FILE, &self.store))?;
        self.store
            .sync_dir()
            .map_err(io("fsync directory of", CURRENT_FILE, &self.store))?;
        self.generation = generation;
        Ok(())
    }
}

/// An exclusive lock on a data dir, held while the node runs (released on drop).
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    pub fn acquire(dir: &Path) -> Result<DataDirLock, StateError> {
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| StateError::Io {
                op: "open",
                file: path.display().to_string(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => Ok(DataDirLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(StateError::Locked {
                dir: dir.display().to_string(),
                lock: path.display().to_string(),
            }),
            Err(std::fs::TryLockError::Error(source)) => Err(StateError::Io {
                op: "lock",
                file: path.display().to_string(),
                source,
            }),
        }
    }
}
