//! An environment whose data file goes through a wrapper the test holds (a device that
//! holds, fails or counts IOs of its own kind), for the suites that inject faults at one
//! step of a protocol.

use std::sync::{Arc, Mutex};

use strata::storage::{Device, Env, EnvLock, FileKind, SimEnv};
use strata::Result;

/// A simulated environment whose data file goes through a wrapper `D` (a `Meeting`, a
/// `Hooked`), kept for the test to reach.
#[derive(Debug)]
pub struct WrapEnv<D> {
    pub sim: SimEnv,
    wrap: fn(Arc<dyn Device>) -> D,
    data: Mutex<Option<Arc<D>>>,
}

impl<D> WrapEnv<D> {
    pub fn new(wrap: fn(Arc<dyn Device>) -> D) -> WrapEnv<D> {
        WrapEnv {
            sim: SimEnv::new(),
            wrap,
            data: Mutex::new(None),
        }
    }

    pub fn data(&self) -> Arc<D> {
        self.data
            .lock()
            .unwrap()
            .clone()
            .expect("the data file is open")
    }
}

impl<D: Device + 'static> Env for WrapEnv<D> {
    fn location(&self) -> String {
        self.sim.location()
    }
    fn lock(&self, name: &str, create: bool) -> Result<EnvLock> {
        self.sim.lock(name, create)
    }
    fn open(&self, name: &str, kind: FileKind, create: bool) -> Result<Option<Arc<dyn Device>>> {
        let Some(dev) = self.sim.open(name, kind, create)? else {
            return Ok(None);
        };
        if kind != FileKind::Data {
            return Ok(Some(dev));
        }
        let d = Arc::new((self.wrap)(dev));
        *self.data.lock().unwrap() = Some(d.clone());
        Ok(Some(d))
    }
}

/// A device that forwards every call to `inner`, after the test's hook for reads or writes
/// (`S` is the hook's state): a hook may wait, or fail the IO by returning an error.
#[derive(Debug)]
pub struct Hooked<S> {
    pub inner: Arc<dyn Device>,
    pub state: S,
    pub on_read: fn(&S) -> Result<()>,
    pub on_write: fn(&S, &[u8], u64) -> Result<()>,
}

/// A hook that lets the IO go.
pub fn pass<S>(_: &S) -> Result<()> {
    Ok(())
}

/// A write hook that lets the write go.
pub fn pass_write<S>(_: &S, _: &[u8], _: u64) -> Result<()> {
    Ok(())
}

impl<S: std::fmt::Debug + Send + Sync> Device for Hooked<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        (self.on_read)(&self.state)?;
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        (self.on_write)(&self.state, data, offset)?;
        self.inner.write_at(data, offset)
    }
    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }
}
