//! Group commit: writers that wait on a log sync at the same time share it, and every batch they
//! were told is durable survives a power cut.

use std::sync::Arc;
use std::time::Duration;

use strata::storage::SimEnv;
use strata::{Db, Durability, Options};

#[test]
fn concurrent_synced_writers_share_fsyncs_and_survive_a_crash() {
    let env = SimEnv::new();
    env.disk().set_sync_latency(Duration::from_millis(2));
    let db = Arc::new(Db::open_in(&env, Options::default().durability(Durability::Sync)).unwrap());
    let before = db.metrics().wal_io.syncs;
    let threads = 8;
    let per_thread = 40;
    std::thread::scope(|s| {
        for t in 0..threads {
            let db = db.clone();
            s.spawn(move || {
                for i in 0..per_thread {
                    db.put(format!("t{t}-{i:03}"), [t as u8; 10]).unwrap();
                }
            });
        }
    });
    let m = db.metrics();
    let syncs = m.wal_io.syncs - before;
    let batches = (threads * per_thread) as u64;
    eprintln!("{syncs} log syncs for {batches} synced batches from {threads} threads");
    assert_eq!(m.batches, batches);
    assert!(syncs >= 1);
    assert!(
        syncs * 2 < batches,
        "{syncs} log syncs for {batches} synced batches: no grouping"
    );
    drop(db);
    env.crash();
    let db = Db::open_in(&env, Options::default()).unwrap();
    assert_eq!(
        db.iter().unwrap().count() as u64,
        batches,
        "an acknowledged batch was lost"
    );
}

#[test]
fn unsynced_writes_may_be_lost_on_power_cut_but_sync_makes_them_durable() {
    let env = SimEnv::new();
    let opts = Options::default().durability(Durability::None);
    let db = Db::open_in(&env, opts.clone()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.sync().unwrap();
    db.put(b"b", b"2").unwrap();
    assert_eq!(
        db.metrics().wal_io.syncs,
        1,
        "Durability::None must not sync the log per write"
    );
    drop(db);
    env.crash();
    let db = Db::open_in(&env, opts).unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(
        db.get(b"b").unwrap(),
        None,
        "unsynced write survived a simulated power cut"
    );
}
