//! An environment whose data file goes through a wrapper the test holds (a device that
//! holds, fails or counts IOs of its own kind), for the suites that inject faults at one
//! step of a protocol.

use std::sync::{Arc, Mutex};

use strata::storage::{Device, Env, EnvLock, FileKind, SimEnv};
use strata::Result;

/// A simulated environment whose data file goes through a wrapper `D` (a `Meeting`, a
/// `HeldFailure`), kept for the test to reach.
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
