//! `EngineOptions::Auto` (the default): a new database takes the tuner's Bε-tree geometry from
//! the saved device profile when there is one, from the built-in SSD figures when there is
//! none, and a clear error when the saved profile does not parse. What it used is recorded in the
//! superblock and reported in the metrics. One test, alone in this binary, because it sets the
//! process's STRATA_PROFILE.

use strata::profile::DeviceProfile;
use strata::storage::SimEnv;
use strata::tune::Workload;
use strata::{Db, Error, Options};

#[test]
fn auto_geometry_follows_the_saved_profile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.json");
    std::env::set_var("STRATA_PROFILE", &path);

    // No profile saved: the tuner's choice for the options' cache and expected keys, priced
    // with the built-in figures.
    let tuned = |profile: &DeviceProfile, keys: u64, cache: usize| {
        let mut w = Workload::new(keys);
        w.cache_bytes = cache as u64;
        match Options::tuned(profile, &w).engine {
            strata::EngineOptions::BeTree {
                node_size,
                fanout,
                basement,
            } => (node_size as u64, fanout as u64, basement as u64),
            other => panic!("tuned options are not a Bε-tree: {other:?}"),
        }
    };
    let geometry = |db: &Db| {
        let e = db.metrics().engine;
        (e.node_size, e.detail("fanout"), e.detail("basement_size"))
    };
    let env = SimEnv::new();
    let opts = Options::default()
        .cache_bytes(32 << 20)
        .expected_keys(1_000_000);
    let db = Db::open_in(&env, opts).unwrap();
    assert_eq!(
        geometry(&db),
        tuned(&DeviceProfile::builtin(), 1_000_000, 32 << 20)
    );
    let e = db.metrics().engine;
    assert_eq!(e.engine, "betree");
    assert!(
        e.geometry_origin.contains("built-in"),
        "{}",
        e.geometry_origin
    );
    // Small basements out of memory, where the old fixed default had 64 KiB ones.
    assert!(e.detail("basement_size") <= 16 << 10, "{e:?}");
    drop(db);

    // A saved profile: the tuner's choice for the options' cache and expected keys, which is
    // also what Options::tuned gives.
    let profile = DeviceProfile::builtin();
    profile.save(&path).unwrap();
    let opts = Options::default()
        .cache_bytes(32 << 20)
        .expected_keys(50_000_000);
    let env = SimEnv::new();
    let db = Db::open_in(&env, opts.clone()).unwrap();
    assert_eq!(geometry(&db), tuned(&profile, 50_000_000, 32 << 20));
    let e = db.metrics().engine;
    assert_eq!(e.geometry_origin, "tuned from the saved device profile");
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    // Reopening keeps the geometry and where it came from, whatever the options say now.
    std::fs::remove_file(&path).unwrap();
    let db = Db::open_in(&env, Options::default().betree(64 << 10, 4, 4 << 10)).unwrap();
    let again = db.metrics().engine;
    assert_eq!(
        (again.node_size, again.geometry_origin),
        (e.node_size, e.geometry_origin)
    );
    drop(db);

    // A saved profile that does not parse: a clear error naming it, and nothing created.
    std::fs::write(&path, b"{ not json").unwrap();
    let target = dir.path().join("db");
    match Db::open(&target, Options::default()) {
        Err(Error::InvalidOptions(why)) => assert!(why.contains("profile.json"), "{why}"),
        other => panic!("expected InvalidOptions, got {:?}", other.err()),
    }
    assert!(
        !target.exists(),
        "a refused open created {}",
        target.display()
    );
    // Explicit geometry does not consult the profile at all.
    assert!(Db::open_in(
        &SimEnv::new(),
        Options::default().betree(64 << 10, 8, 4 << 10)
    )
    .is_ok());
}
