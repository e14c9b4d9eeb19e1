//! The device: a flat, byte-addressed file that an engine reads and writes at any offset and
//! length. Every engine's IO goes through this trait (rule 1 of DESIGN.md), so every IO can be
//! counted (`Metered`), simulated (`SimDevice`) or failed on purpose.
//!
//! `FileDevice` is one real file driven by pread/pwrite. In direct mode it opens the file with
//! O_DIRECT so the page cache is bypassed; requests that are not 4 KiB aligned (offset, length or
//! buffer address) are bounced through an aligned buffer, writes by read-modify-write.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::iostats::IoStats;
use crate::error::{Error, Result};

/// Alignment that O_DIRECT needs on Linux for offsets, lengths and buffer addresses.
pub const DIRECT_ALIGN: usize = 4096;

#[allow(clippy::len_without_is_empty)]
pub trait Device: Send + Sync + std::fmt::Debug {
    /// The file this device stands for; used in error messages.
    fn name(&self) -> &str;
    /// Fill `buf` from `offset`. Reading past the end is an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Fill each `(offset, buf)` of `reqs`, the reads outstanding at once: a device that
    /// serves several IOs together (an SSD's queue, the PDAM's P) finishes them in about the
    /// time of the longest. By default one after another.
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<()> {
        for (offset, buf) in reqs.iter_mut() {
            self.read_at(buf, *offset)?;
        }
        Ok(())
    }
    /// Write all of `data` at `offset`, growing the device if needed.
    fn write_at(&self, data: &[u8], offset: u64) -> Result<()>;
    /// Write `parts` back to back from `offset`, as one IO (a node's head and its partitions,
    /// without first copying them into one buffer).
    fn write_parts_at(&self, parts: &[&[u8]], offset: u64) -> Result<()> {
        self.write_at(&parts.concat(), offset)
    }
    /// Make every completed write durable.
    fn sync(&self) -> Result<()>;
    /// Start writing `len` bytes at `offset` to the device and wait until they are written,
    /// without flushing the device's cache: a background writer calls this after each block
    /// so that the device's queue stays short and a log sync meanwhile need not wait behind
    /// everything it wrote. Durability still takes `sync`.
    fn write_out(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }
    /// Start writing `len` bytes at `offset` to the device, without waiting. A writer that
    /// leaves blocks in the page cache until a later `sync` calls this as it goes, so that the
    /// kernel does not write them out in bursts that a log's sync meanwhile waits behind (on
    /// ext4 a log's fdatasync commits the journal, which waits for the data blocks allocated
    /// in it). Only a hint: durability still takes `sync`, which reports any failed write.
    fn start_write_out(&self, _offset: u64, _len: u64) {}
    /// `len` bytes at `offset` are durable and will not be read soon: the OS may drop them from
    /// its cache (a log's synced records). Only a hint; dirty bytes are never lost by it.
    fn forget(&self, _offset: u64, _len: u64) {}
    fn len(&self) -> Result<u64>;
    fn set_len(&self, len: u64) -> Result<()>;
    /// Give `len` bytes at `offset`, which hold nothing anyone will read again, back to the
    /// file system, leaving a hole that reads as zeros (the file's length is unchanged). A
    /// device that cannot does nothing: the space stays allocated and is reused all the same.
    fn discard(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }
    /// Bytes the device has really allocated (a sparse file allocates less than its length).
    fn allocated(&self) -> Result<u64> {
        self.len()
    }
}

/// A device wrapper that charges every IO to an `IoStats`.
#[derive(Debug)]
pub struct Metered {
    inner: Arc<dyn Device>,
    stats: Arc<IoStats>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Device>, stats: Arc<IoStats>) -> Metered {
        Metered { inner, stats }
    }
}

impl Device for Metered {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.stats.record_read(buf.len() as u64);
        self.inner.read_at(buf, offset)
    }
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<()> {
        for (_, buf) in reqs.iter() {
            self.stats.record_read(buf.len() as u64);
        }
        self.inner.read_many(reqs)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        self.stats.record_write(data.len() as u64);
        self.inner.write_at(data, offset)
    }
    fn write_parts_at(&self, parts: &[&[u8]], offset: u64) -> Result<()> {
        self.stats
            .record_write(parts.iter().map(|p| p.len() as u64).sum());
        self.inner.write_parts_at(parts, offset)
    }
    fn sync(&self) -> Result<()> {
        self.stats.record_sync();
        self.inner.sync()
    }
    fn write_out(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.write_out(offset, len)
    }
    fn start_write_out(&self, offset: u64, len: u64) {
        self.inner.start_write_out(offset, len)
    }
    fn forget(&self, offset: u64, len: u64) {
        self.inner.forget(offset, len)
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.discard(offset, len)
    }
    fn allocated(&self) -> Result<u64> {
        self.inner.allocated()
    }
}

#[derive(Debug)]
pub struct FileDevice {
    file: File,
    name: String,
    direct: bool,
    /// The AIO context of `read_many`, made on its first use and kept (making and destroying
    /// one costs milliseconds: io_destroy waits for an RCU grace period); None until then,
    /// or when AIO is unavailable.
    aio: std::sync::Mutex<Option<aio::Context>>,
}

impl FileDevice {
    /// Open (or create) `path`. With `direct`, the page cache is bypassed; a file system that
    /// refuses O_DIRECT (tmpfs, for one) gives `InvalidOptions` naming the path.
    pub fn open(path: &Path, create: bool, direct: bool) -> Result<FileDevice> {
        let name = path.display().to_string();
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(create);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        match opts.open(path) {
            Ok(file) => Ok(FileDevice {
                file,
                name,
                direct,
                aio: std::sync::Mutex::new(None),
            }),
            Err(e) if direct && e.raw_os_error() == Some(libc::EINVAL) => {
                Err(Error::InvalidOptions(format!(
                    "the file system holding {name} does not support O_DIRECT"
                )))
            }
            Err(e) => Err(Error::io(format!("open {name}"), e)),
        }
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from(&self.name)
    }

    fn aligned(buf_addr: usize, offset: u64, len: usize) -> bool {
        buf_addr.is_multiple_of(DIRECT_ALIGN)
            && offset.is_multiple_of(DIRECT_ALIGN as u64)
            && len.is_multiple_of(DIRECT_ALIGN)
    }

    /// One read exactly as asked, with no 4 KiB bounce: under O_DIRECT the caller aligns the
    /// buffer, offset and length to the device's logical block, or the kernel refuses it.
    pub fn read_direct_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.pread(buf, offset)
    }

    fn pread(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file.read_exact_at(buf, offset).map_err(|e| {
            Error::io(
                format!("read {} bytes at {offset} of {}", buf.len(), self.name),
                e,
            )
        })
    }

    fn pwrite(&self, data: &[u8], offset: u64) -> Result<()> {
        self.file.write_all_at(data, offset).map_err(|e| {
            Error::io(
                format!("write {} bytes at {offset} of {}", data.len(), self.name),
                e,
            )
        })
    }

    /// The aligned window [start, end) that covers `offset .. offset + len`.
    fn window(offset: u64, len: usize) -> (u64, usize) {
        let a = DIRECT_ALIGN as u64;
        let start = offset / a * a;
        let end = (offset + len as u64).div_ceil(a) * a;
        (start, (end - start) as usize)
    }
}

impl Device for FileDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if !self.direct || Self::aligned(buf.as_ptr() as usize, offset, buf.len()) {
            return self.pread(buf, offset);
        }
        let (start, wlen) = Self::window(offset, buf.len());
        let mut bounce = AlignedBuf::zeroed(wlen);
        // The window may run past the end of the file; a short read there is fine as long as the
        // requested bytes arrive.
        let file_len = self.len()?;
        let avail = file_len.saturating_sub(start).min(wlen as u64) as usize;
        let need = (offset - start) as usize + buf.len();
        if avail < need {
            return Err(Error::io(
                format!("read {} bytes at {offset} of {}", buf.len(), self.name),
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            ));
        }
        let mut got = 0;
        while got < need {
            let n = self
                .file
                .read_at(&mut bounce.as_mut_slice()[got..], start + got as u64)
                .map_err(|e| Error::io(format!("read at {offset} of {}", self.name), e))?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got < need {
            return Err(Error::io(
                format!("read {} bytes at {offset} of {}", buf.len(), self.name),
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            ));
        }
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&bounce.as_slice()[skip..skip + buf.len()]);
        Ok(())
    }

    /// With O_DIRECT, the reads submitted together through Linux's native AIO (`aio`): one
    /// system call queues them all, and the kernel completes them without a thread each. A
    /// read that comes back short (near the file's end) is done again alone, and so is
    /// everything when AIO is unavailable; without O_DIRECT (the page cache) one after
    /// another.
    fn read_many(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<()> {
        if !self.direct || reqs.len() < 2 {
            for (offset, buf) in reqs.iter_mut() {
                self.read_at(buf, *offset)?;
            }
            return Ok(());
        }
        let windows: Vec<(u64, usize)> = reqs
            .iter()
            .map(|(offset, buf)| Self::window(*offset, buf.len()))
            .collect();
        let mut bounces: Vec<AlignedBuf> = windows
            .iter()
            .map(|&(_, len)| AlignedBuf::zeroed(len))
            .collect();
        let got = {
            let mut ctx = self.aio.lock().unwrap_or_else(|e| e.into_inner());
            if ctx.is_none() {
                *ctx = aio::Context::new().ok();
            }
            match ctx.as_ref() {
                Some(c) => c.read(self.file.as_raw_fd(), &windows, &mut bounces),
                None => Err(std::io::Error::from(std::io::ErrorKind::Unsupported)),
            }
        };
        for (i, (offset, buf)) in reqs.iter_mut().enumerate() {
            let skip = (*offset - windows[i].0) as usize;
            match got.as_ref().map(|g| g[i]) {
                Ok(n) if n >= (skip + buf.len()) as i64 => {
                    buf.copy_from_slice(&bounces[i].as_slice()[skip..skip + buf.len()]);
                }
                _ => self.read_at(buf, *offset)?,
            }
        }
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        if !self.direct || Self::aligned(data.as_ptr() as usize, offset, data.len()) {
            return self.pwrite(data, offset);
        }
        let (start, wlen) = Self::window(offset, data.len());
        let mut bounce = AlignedBuf::zeroed(wlen);
        let file_len = self.len()?;
        // Read-modify-write the partial blocks at either end of the window.
        let a = DIRECT_ALIGN;
        for block in [start, start + (wlen - a) as u64] {
            if block < file_len {
                let off = (block - start) as usize;
                self.file
                    .read_at(&mut bounce.as_mut_slice()[off..off + a], block)
                    .map_err(|e| Error::io(format!("read at {block} of {}", self.name), e))?;
            }
        }
        let skip = (offset - start) as usize;
        bounce.as_mut_slice()[skip..skip + data.len()].copy_from_slice(data);
        self.pwrite(bounce.as_slice(), start)?;
        // The aligned write may have grown the file past what the caller wrote; trim it back.
        let end = offset + data.len() as u64;
        if start + wlen as u64 > file_len.max(end) {
            self.set_len(file_len.max(end))?;
        }
        Ok(())
    }

    fn write_parts_at(&self, parts: &[&[u8]], offset: u64) -> Result<()> {
        if self.direct {
            return self.write_at(&parts.concat(), offset);
        }
        let mut iov: Vec<libc::iovec> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        let (mut next, mut at) = (0, offset);
        let fail = |at: u64, e| Error::io(format!("write at {at} of {}", self.name), e);
        while next < iov.len() {
            // At most IOV_MAX (1024 on Linux) buffers per call.
            let n = (iov.len() - next).min(1024) as libc::c_int;
            // SAFETY: the iovecs point into `parts`, which outlive the call, and pwritev only
            // reads through them.
            let wrote = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    iov[next..].as_ptr(),
                    n,
                    at as libc::off_t,
                )
            };
            if wrote < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(fail(at, e));
            }
            if wrote == 0 {
                return Err(fail(at, std::io::ErrorKind::WriteZero.into()));
            }
            at += wrote as u64;
            // Skip what was written; a short write leaves the rest of one buffer.
            let mut left = wrote as usize;
            while left > 0 {
                let v = &mut iov[next];
                if left >= v.iov_len {
                    left -= v.iov_len;
                    next += 1;
                } else {
                    // SAFETY: `left` is inside this buffer.
                    v.iov_base = unsafe { (v.iov_base as *mut u8).add(left) } as *mut libc::c_void;
                    v.iov_len -= left;
                    left = 0;
                }
            }
        }
        Ok(())
    }

    fn write_out(&self, offset: u64, len: u64) -> Result<()> {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: a plain system call on a file descriptor this device owns.
        let r = unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                flags,
            )
        };
        if r < 0 {
            return Err(Error::io(
                format!("write out {len} bytes at {offset} of {}", self.name),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    fn start_write_out(&self, offset: u64, len: u64) {
        // SAFETY: a plain system call on a file descriptor this device owns. Its result is a
        // hint's: a failed write shows at the next sync.
        unsafe {
            libc::sync_file_range(
                self.file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }

    fn forget(&self, offset: u64, len: u64) {
        if self.direct || len == 0 {
            return;
        }
        // SAFETY: a plain system call on a file descriptor this device owns. A hint: clean
        // pages are dropped, dirty ones only queued for writing.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
        }
    }

    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io(format!("fdatasync {}", self.name), e))
    }

    fn len(&self) -> Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| Error::io(format!("stat {}", self.name), e))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| Error::io(format!("truncate {} to {len}", self.name), e))
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: a plain system call on a file descriptor this device owns.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            // A file system without holes keeps the space; nothing is lost but the saving.
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                return Ok(());
            }
            return Err(Error::io(
                format!("punch a hole of {len} bytes at {offset} in {}", self.name),
                e,
            ));
        }
        Ok(())
    }

    fn allocated(&self) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        self.file
            .metadata()
            .map(|m| m.blocks() * 512)
            .map_err(|e| Error::io(format!("stat {}", self.name), e))
    }
}

/// A zeroed heap buffer whose address is 4 KiB aligned, for O_DIRECT.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        let layout = Self::layout(len);
        // SAFETY: the layout has non-zero size (at least one aligned block).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr =
            std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len.max(DIRECT_ALIGN), DIRECT_ALIGN)
            .expect("buffer size overflows a layout")
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with the same layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

/// Linux native AIO (io_setup, io_submit, io_getevents), for reads outstanding together
/// without a thread each. Only what `FileDevice::read_many` needs: preads into 4 KiB aligned
/// buffers of a file opened with O_DIRECT (without it the kernel would serve them one by one).
mod aio {
    use super::AlignedBuf;

    /// `struct iocb` of linux/aio_abi.h (x86-64 and other little-endian 64-bit layouts).
    #[repr(C)]
    #[derive(Default)]
    struct IoCb {
        data: u64,
        key: u32,
        rw_flags: i32,
        opcode: u16,
        reqprio: i16,
        fildes: u32,
        buf: u64,
        nbytes: u64,
        offset: i64,
        reserved2: u64,
        flags: u32,
        resfd: u32,
    }

    /// `struct io_event`.
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct IoEvent {
        data: u64,
        obj: u64,
        res: i64,
        res2: i64,
    }

    const IOCB_CMD_PREAD: u16 = 0;

    /// The most reads one context has outstanding; a larger batch goes in slices.
    const DEPTH: usize = 64;

    /// A kernel AIO context (`aio_context_t`), used by one caller at a time (its owner holds
    /// it under a lock) and destroyed when dropped.
    #[derive(Debug)]
    pub(super) struct Context(libc::c_ulong);

    impl Context {
        pub(super) fn new() -> std::io::Result<Context> {
            // `IoCb` above has the 64-bit little-endian layout; elsewhere `read_many` reads one
            // after another.
            if !cfg!(all(target_pointer_width = "64", target_endian = "little")) {
                return Err(std::io::Error::from(std::io::ErrorKind::Unsupported));
            }
            let mut ctx: libc::c_ulong = 0;
            // SAFETY: io_setup writes the new context to `ctx`, which outlives the call.
            if unsafe { libc::syscall(libc::SYS_io_setup, DEPTH as libc::c_long, &mut ctx) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(Context(ctx))
        }

        /// Read `windows[i]` (offset, length) of `fd` into `bufs[i]`, submitted together (in
        /// slices of `DEPTH`); the bytes each read returned (negative: an errno), or an error
        /// if AIO failed (then, as on every return, no read is still outstanding).
        pub(super) fn read(
            &self,
            fd: i32,
            windows: &[(u64, usize)],
            bufs: &mut [AlignedBuf],
        ) -> std::io::Result<Vec<i64>> {
            let mut out = Vec::with_capacity(windows.len());
            for (w, b) in windows.chunks(DEPTH).zip(bufs.chunks_mut(DEPTH)) {
                out.extend(submit_and_wait(self.0, fd, w, b)?);
            }
            Ok(out)
        }
    }

    impl Drop for Context {
        fn drop(&mut self) {
            // SAFETY: no read is outstanding (each `read` waits for all of its own).
            unsafe { libc::syscall(libc::SYS_io_destroy, self.0) };
        }
    }

    /// Submit the reads and wait for all of them. If a submission fails after some went in,
    /// those are still waited for before returning, so no buffer is written after.
    fn submit_and_wait(
        ctx: libc::c_ulong,
        fd: i32,
        windows: &[(u64, usize)],
        bufs: &mut [AlignedBuf],
    ) -> std::io::Result<Vec<i64>> {
        let mut cbs: Vec<IoCb> = windows
            .iter()
            .zip(bufs.iter_mut())
            .enumerate()
            .map(|(i, (&(offset, len), buf))| IoCb {
                data: i as u64,
                opcode: IOCB_CMD_PREAD,
                fildes: fd as u32,
                buf: buf.as_mut_slice().as_mut_ptr() as u64,
                nbytes: len as u64,
                offset: offset as i64,
                ..IoCb::default()
            })
            .collect();
        let mut ptrs: Vec<*mut IoCb> = cbs.iter_mut().map(|c| c as *mut IoCb).collect();
        let (mut submitted, mut failed) = (0, None);
        while submitted < ptrs.len() {
            // SAFETY: each iocb and the buffer it names live until io_destroy (see `read`).
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    ctx,
                    (ptrs.len() - submitted) as libc::c_long,
                    ptrs[submitted..].as_mut_ptr(),
                )
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                failed = Some(e);
                break;
            }
            submitted += rc as usize;
        }
        let mut res = vec![-1i64; cbs.len()];
        let mut events = vec![IoEvent::default(); cbs.len()];
        let mut done = 0;
        while done < submitted {
            let want = (submitted - done) as libc::c_long;
            // SAFETY: `events` has room for `want` events; no timeout (a null pointer).
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    ctx,
                    want,
                    want,
                    events.as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // Reads are outstanding into buffers the caller will free: returning would
                // let the kernel write into freed memory. With a valid context and event
                // array this cannot fail; if it does, stop the process rather than that.
                eprintln!("io_getevents failed with reads outstanding: {e}");
                std::process::abort();
            }
            for ev in &events[..rc as usize] {
                res[ev.data as usize] = ev.res;
            }
            done += rc as usize;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(res),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_land_back_to_back_even_past_the_iovec_limit() {
        let dir = tempfile::tempdir().unwrap();
        let dev = FileDevice::open(&dir.path().join("f"), true, false).unwrap();
        // 3,000 parts of varying sizes (some empty) take three pwritev calls.
        let parts: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![(i % 251) as u8; (i % 7) as usize * 3])
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        dev.write_parts_at(&refs, 100).unwrap();
        let want = refs.concat();
        let mut got = vec![0u8; want.len()];
        dev.read_at(&mut got, 100).unwrap();
        assert_eq!(got, want);
        assert_eq!(dev.len().unwrap(), 100 + want.len() as u64);
        dev.write_out(0, dev.len().unwrap()).unwrap();
    }

    #[test]
    fn file_device_reads_back_unaligned_io_in_both_modes() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("f{direct}"));
            let dev = match FileDevice::open(&path, true, direct) {
                Ok(d) => d,
                // tmpfs and some overlay file systems refuse O_DIRECT; that is the error we promise.
                Err(Error::InvalidOptions(msg)) if direct => {
                    assert!(msg.contains("O_DIRECT"), "{msg}");
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            dev.write_at(&[7u8; 10_000], 0).unwrap();
            dev.write_at(b"hello", 4093).unwrap();
            assert_eq!(dev.len().unwrap(), 10_000);
            let mut buf = [0u8; 7];
            dev.read_at(&mut buf, 4092).unwrap();
            assert_eq!(&buf, b"\x07hello\x07");
            let mut past = [0u8; 8];
            assert!(
                dev.read_at(&mut past, 9_996).is_err(),
                "read past the end must fail"
            );
        }
    }

    /// Reads submitted together (through AIO with O_DIRECT) give what the same reads give
    /// one by one: aligned or not, one that ends at the file's end, one past it refused.
    #[test]
    fn reads_together_give_what_reads_alone_give() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let path = dir.path().join(format!("f{direct}"));
            let dev = match FileDevice::open(&path, true, direct) {
                Ok(d) => d,
                Err(Error::InvalidOptions(_)) if direct => continue,
                Err(e) => panic!("{e}"),
            };
            let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
            dev.write_at(&data, 0).unwrap();
            let asks = [
                (0u64, 4096usize),
                (4093, 7),
                (8192, 16384),
                (30_001, 5_000),
                (49_990, 10),
            ];
            let mut bufs: Vec<Vec<u8>> = asks.iter().map(|&(_, n)| vec![0; n]).collect();
            let mut reqs: Vec<(u64, &mut [u8])> = asks
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&(o, _), b)| (o, b.as_mut_slice()))
                .collect();
            dev.read_many(&mut reqs).unwrap();
            for (&(o, n), b) in asks.iter().zip(&bufs) {
                assert_eq!(b.as_slice(), &data[o as usize..o as usize + n], "at {o}");
            }
            let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
            let mut past = [(0u64, &mut a[..]), (49_996, &mut b[..])];
            assert!(
                dev.read_many(&mut past).is_err(),
                "a read past the end fails"
            );
        }
    }
}
