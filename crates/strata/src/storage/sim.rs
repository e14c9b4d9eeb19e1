//! SimDevice: a device in memory with a virtual clock and injected faults, for deterministic tests
//! and for experiments whose IO counts must be exact.
//!
//! Each device keeps two images: `current`, what reads see, and `durable`, what survives a crash.
//! Writes and length changes since the last `sync` are kept as a list and applied to `durable`
//! when `sync` is called; `crash` throws them away. The devices of one `SimEnv` share a fault plan
//! and crash together, as the files of one database on one disk would.
//!
//! Faults: fail the Nth IO (once, or that one and every later one), and tear the Nth write: only a
//! prefix of its 512-byte sectors reaches the durable image, the write reports an error and the
//! disk is dead (every IO fails) until `crash()`, as after a power cut in mid-write.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::device::Device;
use crate::error::{Error, Result};
use crate::model::Affine;

pub const SECTOR: usize = 512;

#[derive(Debug, Default)]
struct Faults {
    /// IOs (reads, writes, syncs) issued so far across the environment.
    ios: u64,
    writes: u64,
    fail_at: Option<u64>,
    fail_sticky: bool,
    tear: Option<(u64, usize)>,
    dead: bool,
}

/// Shared by every device of a `SimEnv`: fault plan and virtual clock.
#[derive(Debug)]
pub struct SimDisk {
    faults: Mutex<Faults>,
    clock: Mutex<SimClock>,
}

#[derive(Debug)]
struct SimClock {
    model: Affine,
    sync_s: f64,
    now_s: f64,
    /// Real time each sync sleeps, so concurrent callers overlap as on a real disk.
    sync_wall: std::time::Duration,
}

impl SimDisk {
    pub fn new(model: Affine, sync_s: f64) -> Arc<SimDisk> {
        Arc::new(SimDisk {
            faults: Mutex::new(Faults::default()),
            clock: Mutex::new(SimClock {
                model,
                sync_s,
                now_s: 0.0,
                sync_wall: std::time::Duration::ZERO,
            }),
        })
    }

    fn faults(&self) -> MutexGuard<'_, Faults> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fail IO number `n` (counting from 1 from now); with `sticky`, every IO after it fails too.
    pub fn fail_io_after(&self, n: u64, sticky: bool) {
        let mut f = self.faults();
        f.fail_at = Some(f.ios + n.max(1));
        f.fail_sticky = sticky;
    }

    /// Tear write number `n` (from now): only its first `sectors` sectors land durably.
    pub fn tear_write_after(&self, n: u64, sectors: usize) {
        let mut f = self.faults();
        f.tear = Some((f.writes + n.max(1), sectors));
    }

    pub fn clear_faults(&self) {
        let mut f = self.faults();
        f.fail_at = None;
        f.tear = None;
        f.dead = false;
    }

    pub fn is_dead(&self) -> bool {
        self.faults().dead
    }

    /// Seconds of simulated device time spent so far.
    pub fn clock_s(&self) -> f64 {
        self.clock.lock().unwrap_or_else(|e| e.into_inner()).now_s
    }

    pub fn set_model(&self, model: Affine, sync_s: f64) {
        let mut c = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        c.model = model;
        c.sync_s = sync_s;
    }

    /// Make every sync take `wall` of real time (for tests of concurrent commit).
    pub fn set_sync_latency(&self, wall: std::time::Duration) {
        self.clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sync_wall = wall;
    }

    fn sync_latency(&self) -> std::time::Duration {
        self.clock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sync_wall
    }

    fn tick(&self, bytes: Option<u64>) {
        let mut c = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        c.now_s += match bytes {
            Some(b) => c.model.cost(b),
            None => c.sync_s,
        };
    }

    /// Decide the fate of the next IO: Ok(None) proceed, Ok(Some(k)) tear after k sectors, Err fail.
    fn admit(&self, is_write: bool, what: &str) -> Result<Option<usize>> {
        let mut f = self.faults();
        if f.dead {
            return Err(injected(
                what,
                "the simulated disk is dead after a torn write",
            ));
        }
        f.ios += 1;
        if let Some(at) = f.fail_at {
            if f.ios == at || (f.fail_sticky && f.ios > at) {
                return Err(injected(what, "injected IO error"));
            }
        }
        if is_write {
            f.writes += 1;
            if let Some((at, sectors)) = f.tear {
                if f.writes == at {
                    f.tear = None;
                    f.dead = true;
                    return Ok(Some(sectors));
                }
            }
        }
        Ok(None)
    }
}

fn injected(what: &str, why: &str) -> Error {
    Error::io(what.to_string(), io::Error::other(why.to_string()))
}

#[derive(Debug)]
enum Pending {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Default)]
struct Images {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
}

fn put(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset as usize..end].copy_from_slice(data);
}

#[derive(Debug)]
pub struct SimDevice {
    name: String,
    disk: Arc<SimDisk>,
    images: Mutex<Images>,
}

impl SimDevice {
    pub fn new(name: &str, disk: Arc<SimDisk>) -> SimDevice {
        SimDevice {
            name: name.to_string(),
            disk,
            images: Mutex::new(Images::default()),
        }
    }

    fn images(&self) -> MutexGuard<'_, Images> {
        self.images.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lose everything written since the last sync.
    pub fn crash(&self) {
        let mut im = self.images();
        im.pending.clear();
        im.current = im.durable.clone();
    }

    /// Flip bits of one byte in both images, as media corruption would.
    pub fn corrupt_byte(&self, offset: u64, xor: u8) {
        let mut guard = self.images();
        let im = &mut *guard;
        for image in [&mut im.current, &mut im.durable] {
            if let Some(b) = image.get_mut(offset as usize) {
                *b ^= xor;
            }
        }
    }

    /// A copy of what reads see now.
    pub fn contents(&self) -> Vec<u8> {
        self.images().current.clone()
    }
}

impl Device for SimDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let what = format!("read {} bytes at {offset} of {}", buf.len(), self.name);
        self.disk.admit(false, &what)?;
        self.disk.tick(Some(buf.len() as u64));
        let im = self.images();
        let end = offset as usize + buf.len();
        if end > im.current.len() {
            return Err(Error::io(
                what,
                io::Error::from(io::ErrorKind::UnexpectedEof),
            ));
        }
        buf.copy_from_slice(&im.current[offset as usize..end]);
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        let what = format!("write {} bytes at {offset} of {}", data.len(), self.name);
        let tear = self.disk.admit(true, &what)?;
        self.disk.tick(Some(data.len() as u64));
        let mut im = self.images();
        if let Some(sectors) = tear {
            // Power is cut mid-write: a prefix reaches the platter, nothing else since sync does.
            let keep = (sectors * SECTOR).min(data.len());
            put(&mut im.durable, offset, &data[..keep]);
            im.pending.clear();
            im.current = im.durable.clone();
            return Err(injected(&what, "torn write (simulated power cut)"));
        }
        put(&mut im.current, offset, data);
        im.pending.push(Pending::Write(offset, data.to_vec()));
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.disk.admit(false, &format!("sync {}", self.name))?;
        self.disk.tick(None);
        let wall = self.disk.sync_latency();
        if !wall.is_zero() {
            std::thread::sleep(wall);
        }
        let mut im = self.images();
        let pending = std::mem::take(&mut im.pending);
        for p in pending {
            match p {
                Pending::Write(off, data) => put(&mut im.durable, off, &data),
                Pending::SetLen(len) => im.durable.resize(len as usize, 0),
            }
        }
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.images().current.len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut im = self.images();
        im.current.resize(len as usize, 0);
        im.pending.push(Pending::SetLen(len));
        Ok(())
    }
}

/// The named devices of one simulated database, sharing one disk.
#[derive(Debug)]
pub struct SimFiles {
    pub disk: Arc<SimDisk>,
    /// Held by the open `Db`, as the file lock is on real files.
    pub(crate) locked: std::sync::atomic::AtomicBool,
    devices: Mutex<BTreeMap<String, Arc<SimDevice>>>,
}

impl SimFiles {
    pub fn new(disk: Arc<SimDisk>) -> SimFiles {
        SimFiles {
            disk,
            locked: Default::default(),
            devices: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<SimDevice>> {
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    pub fn get_or_create(&self, name: &str) -> Arc<SimDevice> {
        let mut d = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        d.entry(name.to_string())
            .or_insert_with(|| Arc::new(SimDevice::new(name, self.disk.clone())))
            .clone()
    }

    pub fn names(&self) -> Vec<String> {
        self.devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Power loss: every device loses its unsynced writes, and the disk works again.
    pub fn crash(&self) {
        for dev in self
            .devices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            dev.crash();
        }
        self.disk.clear_faults();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev() -> (Arc<SimDisk>, SimDevice) {
        let disk = SimDisk::new(Affine::new(100e-6, 1e-9), 1e-3);
        (disk.clone(), SimDevice::new("d", disk))
    }

    #[test]
    fn crash_drops_unsynced_writes_and_length_changes() {
        let (_, d) = dev();
        d.write_at(b"durable", 0).unwrap();
        d.sync().unwrap();
        d.write_at(b"lost", 100).unwrap();
        d.set_len(3).unwrap();
        assert_eq!(d.len().unwrap(), 3);
        d.crash();
        assert_eq!(d.len().unwrap(), 7);
        let mut b = [0u8; 7];
        d.read_at(&mut b, 0).unwrap();
        assert_eq!(&b, b"durable");
    }

    #[test]
    fn nth_io_fails_once_or_sticky() {
        let (disk, d) = dev();
        disk.fail_io_after(2, false);
        d.write_at(b"a", 0).unwrap();
        assert!(d.write_at(b"b", 1).is_err());
        d.write_at(b"c", 2).unwrap();
        disk.fail_io_after(1, true);
        assert!(d.sync().is_err());
        assert!(d.write_at(b"d", 3).is_err());
        disk.clear_faults();
        d.sync().unwrap();
    }

    #[test]
    fn torn_write_keeps_a_sector_prefix_and_kills_the_disk() {
        let (disk, d) = dev();
        d.write_at(&[1u8; 2048], 0).unwrap();
        d.sync().unwrap();
        disk.tear_write_after(1, 1);
        assert!(d.write_at(&[2u8; 2048], 0).is_err());
        assert!(d.write_at(b"x", 0).is_err(), "dead until crash");
        d.crash();
        disk.clear_faults();
        let mut b = vec![0u8; 2048];
        d.read_at(&mut b, 0).unwrap();
        assert!(b[..512].iter().all(|&x| x == 2));
        assert!(b[512..].iter().all(|&x| x == 1));
    }

    #[test]
    fn virtual_clock_charges_the_affine_model() {
        let (disk, d) = dev();
        d.write_at(&[0u8; 1000], 0).unwrap();
        d.sync().unwrap();
        let mut b = [0u8; 1000];
        d.read_at(&mut b, 0).unwrap();
        let expect = 2.0 * (100e-6 + 1000.0 * 1e-9) + 1e-3;
        assert!((disk.clock_s() - expect).abs() < 1e-12);
    }
}
