// A bare threaded pread loop (O_DIRECT, random 64 KiB reads at 4 KiB-aligned offsets), the
// pattern of `strata profile`'s PDAM step, to compare with fio run interleaved with it (issue 19:
// side by side it reads as fast as fio --thread; fio's default, processes, read 10-25% more; and
// this disk's throughput itself moves between 0.7 and 1.5 GiB/s from minute to minute). Not built
// by cargo: `rustc -O scripts/pread-threads.rs -o /tmp/prt` then
// `/tmp/prt FILE THREADS shared|own SECONDS`.
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::{Arc, Barrier};
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let path = &a[1];
    let threads: usize = a[2].parse().unwrap();
    let own = a[3] == "own";
    let secs: f64 = a[4].parse().unwrap();
    let open = || OpenOptions::new().read(true).custom_flags(0o40000).open(path).unwrap();
    let shared = Arc::new(open());
    let size = shared.metadata().unwrap().len();
    let b = 65536usize;
    let barrier = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads).map(|i| {
        let shared = shared.clone(); let barrier = barrier.clone();
        let f = if own { Some(open()) } else { None };
        std::thread::spawn(move || {
            let layout = std::alloc::Layout::from_size_align(b, 4096).unwrap();
            let buf = unsafe { std::slice::from_raw_parts_mut(std::alloc::alloc_zeroed(layout), b) };
            let file = f.as_ref().unwrap_or(&shared);
            let mut x: u64 = 0x9E3779B97F4A7C15 ^ (i as u64 + 1);
            barrier.wait();
            let start = Instant::now();
            let mut n = 0u64;
            loop {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                let off = (x % ((size - b as u64) / 4096)) * 4096;
                file.read_exact_at(buf, off).unwrap();
                n += 1;
                if start.elapsed().as_secs_f64() >= secs { break; }
            }
            (n, start, Instant::now())
        })
    }).collect();
    let rs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let n: u64 = rs.iter().map(|r| r.0).sum();
    let first = rs.iter().map(|r| r.1).min().unwrap();
    let last = rs.iter().map(|r| r.2).max().unwrap();
    let spread = rs.iter().map(|r| r.1).max().unwrap() - first;
    let el = (last - first).as_secs_f64();
    println!("{threads} {} {:.0} MiB/s, start spread {:?}", a[3], n as f64 * b as f64 / el / 1048576.0, spread);
}
