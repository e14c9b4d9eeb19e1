//! Where a database's files live. A database is a small set of named devices (the data file and
//! the write-ahead log); an `Env` opens them. `FileEnv` maps names to files in a directory and
//! holds an exclusive lock on it; `SimEnv` maps them to `SimDevice`s that outlive any one `Db`, so
//! a test can crash the "disk" and open the database again.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::device::{Device, FileDevice};
use super::sim::{SimDisk, SimFiles, SimModel};
use crate::error::{Error, Result};
use crate::model::Affine;

/// The files of a database directory (`Db` and `VersionedDb` alike).
pub const DATA_FILE: &str = "strata.data";
pub const WAL_FILE: &str = "strata.wal";
/// The log's second file: each checkpoint moves the log from one to the other.
pub const WAL_FILE_2: &str = "strata.wal.1";

/// What a device holds; a `FileEnv` opens only data files with O_DIRECT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Data,
    Log,
}

/// Keeps the database exclusively open while alive.
pub struct EnvLock {
    _held: Box<dyn Send + Sync>,
}

pub trait Env: Send + Sync + std::fmt::Debug {
    /// A human-readable location, for messages.
    fn location(&self) -> String;
    /// Take the database's exclusive lock, held through the data file `name` (created, with its
    /// directory, only if `create`). Fails with `Locked` if another open database holds it.
    fn lock(&self, name: &str, create: bool) -> Result<EnvLock>;
    /// Open device `name`; `Ok(None)` when it does not exist and `create` is false.
    fn open(&self, name: &str, kind: FileKind, create: bool) -> Result<Option<Arc<dyn Device>>>;
}

#[derive(Debug, Clone)]
pub struct FileEnv {
    dir: PathBuf,
    direct: bool,
}

impl FileEnv {
    pub fn new(dir: impl AsRef<Path>, direct: bool) -> FileEnv {
        FileEnv {
            dir: dir.as_ref().to_path_buf(),
            direct,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Env for FileEnv {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn lock(&self, name: &str, create: bool) -> Result<EnvLock> {
        let shown = self.location();
        let absent = |why: &str| Error::NotADatabase {
            path: shown.clone(),
            why: why.to_string(),
        };
        match fs::metadata(&self.dir) {
            Ok(m) if !m.is_dir() => {
                return Err(absent("it is a file; a strata database is a directory"))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !create {
                    return Err(absent("the directory does not exist"));
                }
                create_dir_durably(&self.dir)?;
            }
            Err(e) => return Err(Error::io(format!("open directory {shown}"), e)),
        }
        // The lock is an advisory lock on the data file itself, so opening a directory that turns
        // out not to hold a database leaves no trace in it.
        let path = self.dir.join(name);
        let file = match OpenOptions::new().read(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(|e| Error::io(format!("create {}", path.display()), e))?;
                sync_dir(&self.dir)?;
                file
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(absent(&format!("it has no {name}")))
            }
            Err(e) => return Err(Error::io(format!("open {}", path.display()), e)),
        };
        match file.try_lock() {
            Ok(()) => Ok(EnvLock {
                _held: Box::new(file),
            }),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked { path: shown }),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(Error::io(format!("lock {}", path.display()), e))
            }
        }
    }

    fn open(&self, name: &str, kind: FileKind, create: bool) -> Result<Option<Arc<dyn Device>>> {
        let path = self.dir.join(name);
        let existed = path.exists();
        if !create && !existed {
            return Ok(None);
        }
        let direct = self.direct && kind == FileKind::Data;
        let dev = FileDevice::open(&path, create, direct)?;
        if !existed {
            sync_dir(&self.dir)?;
        }
        Ok(Some(Arc::new(dev)))
    }
}

/// A new file's (or directory's) name is durable only once the directory holding it is synced.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("fsync directory {}", dir.display()), e))
}

/// Create `dir` and any missing parents, syncing each parent once its new entry is in it, so
/// that a power cut cannot lose the directory while keeping files written inside it.
fn create_dir_durably(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.as_os_str().is_empty() && !at.exists() {
        missing.push(at);
        match at.parent() {
            Some(p) => at = p,
            None => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {}
            // Another process made it meanwhile: it is there either way.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(format!("create directory {}", d.display()), e)),
        }
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_dir(parent)?;
    }
    Ok(())
}

/// Releases a `SimEnv`'s lock when the `Db` holding it is dropped.
struct SimLock(Arc<SimFiles>);

impl Drop for SimLock {
    fn drop(&mut self) {
        self.0
            .locked
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// An in-memory environment; clone it to keep the "disk" across `Db` instances.
#[derive(Debug, Clone)]
pub struct SimEnv {
    files: Arc<SimFiles>,
}

impl SimEnv {
    pub fn new() -> SimEnv {
        SimEnv::with_model(Affine::default_ssd(), 1e-3)
    }

    /// A simulated disk whose IOs cost `model` and whose syncs cost `sync_s` seconds.
    pub fn with_model(model: Affine, sync_s: f64) -> SimEnv {
        SimEnv {
            files: Arc::new(SimFiles::new(SimDisk::new(model, sync_s))),
        }
    }

    /// A simulated disk priced by `model` (a preset's, `SimPreset::model`: parallelism and
    /// bandwidth included).
    pub fn with_sim_model(model: SimModel) -> SimEnv {
        SimEnv {
            files: Arc::new(SimFiles::new(SimDisk::with_model(model))),
        }
    }

    pub fn disk(&self) -> &Arc<SimDisk> {
        &self.files.disk
    }

    pub fn files(&self) -> &Arc<SimFiles> {
        &self.files
    }

    /// Power loss across every device of this environment: every unsynced write is lost.
    pub fn crash(&self) {
        self.files.crash();
    }

    /// Power loss that keeps a random part of the unsynced writes, per page (`SimDevice::power_cut`);
    /// the same seed keeps the same part.
    pub fn power_cut(&self, seed: u64) {
        self.files.power_cut(seed);
    }
}

impl Default for SimEnv {
    fn default() -> Self {
        SimEnv::new()
    }
}

impl Env for SimEnv {
    fn location(&self) -> String {
        "sim:".to_string()
    }

    fn lock(&self, _name: &str, _create: bool) -> Result<EnvLock> {
        if self
            .files
            .locked
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Err(Error::Locked {
                path: self.location(),
            });
        }
        Ok(EnvLock {
            _held: Box::new(SimLock(self.files.clone())),
        })
    }

    fn open(&self, name: &str, _kind: FileKind, create: bool) -> Result<Option<Arc<dyn Device>>> {
        let existing = self.files.get(name);
        match (existing, create) {
            (Some(d), _) => Ok(Some(d)),
            (None, true) => Ok(Some(self.files.get_or_create(name))),
            (None, false) => Ok(None),
        }
    }
}
