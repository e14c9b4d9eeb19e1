//! The profiler's tests: run against simulated devices from seed 000's tables, it must recover the
//! device's s and t within 5% and its P within 10%; profiles round-trip through JSON and bad ones
//! are clear errors; the scratch-file checks refuse what they should.

use strata::model::SplitMix64;
use strata::profile::{self, DeviceProfile, FileTarget, ProfileConfig, Silent, SimTarget};
use strata::storage::sim::{SimPreset, PRESETS};
use strata::Error;

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got / want - 1.0).abs() <= tol
}

/// A measured size whose reads took `mean` seconds on average.
fn point(bytes: u64, mean: f64) -> profile::AffinePoint {
    profile::AffinePoint {
        bytes,
        ios: 64,
        mean_s: mean,
        median_s: mean,
        stddev_s: 0.0,
        fitted: false,
    }
}

fn sim_profile(
    preset: &str,
    noise: f64,
    seed: u64,
) -> (DeviceProfile, strata::storage::sim::SimModel) {
    let target = SimTarget::preset(preset, noise, seed).unwrap();
    let mut cfg = ProfileConfig::quick();
    cfg.seed = seed;
    let p = profile::profile(&target, &cfg, &Silent).unwrap();
    (p, SimPreset::find(preset).unwrap().model())
}

#[test]
fn recovers_every_preset_s_t_and_p() {
    for preset in PRESETS.iter().filter(|p| p.is_affine()) {
        let (p, truth) = sim_profile(preset.name, 0.03, 11);
        assert!(
            p.affine_holds().is_ok(),
            "{}: {:?}",
            preset.name,
            p.affine_holds()
        );
        let a = &truth.affine;
        assert!(
            within(p.affine.setup_s, a.setup_s, 0.05),
            "{}: s {} vs {}",
            preset.name,
            p.affine.setup_s,
            a.setup_s
        );
        assert!(
            within(p.affine.per_byte_s, a.per_byte_s, 0.05),
            "{}: t {} vs {}",
            preset.name,
            p.affine.per_byte_s,
            a.per_byte_s
        );
        assert!(
            within(p.pdam.parallelism, truth.parallelism, 0.10),
            "{}: P {} vs {}",
            preset.name,
            p.pdam.parallelism,
            truth.parallelism
        );
        // A perfectly affine device: no size is left out of the fit.
        assert!(
            p.affine.excluded_sizes.is_empty(),
            "{}: {:?}",
            preset.name,
            p.affine.excluded_sizes
        );
        assert!(within(p.fsync.mean_s, truth.sync_s, 1e-9));
    }
}

#[test]
fn table1_saturation_bandwidth_is_recovered() {
    for (name, mb) in [("samsung-860-pro", 530.0), ("samsung-970-pro", 2500.0)] {
        let (p, _) = sim_profile(name, 0.03, 5);
        assert!(
            within(p.pdam.saturation_bytes_per_s, mb * 1e6, 0.10),
            "{name}: {} B/s",
            p.pdam.saturation_bytes_per_s
        );
    }
}

#[test]
fn same_seed_same_profile() {
    let (a, _) = sim_profile("samsung-860-pro", 0.05, 3);
    let (mut b, _) = sim_profile("samsung-860-pro", 0.05, 3);
    b.created_unix_s = a.created_unix_s;
    assert_eq!(a, b);
}

#[test]
fn sizes_off_the_line_are_excluded_and_the_rest_fitted() {
    // Synthetic measurements: affine up to 1 MiB, then erratic (the shape seen on the machine
    // strata was built on). The fit must keep the small sizes and name the large ones.
    let (s, t) = (120e-6, 0.94e-9);
    let mut rng = SplitMix64::new(9);
    let points: Vec<profile::AffinePoint> = (12..=24)
        .map(|k| {
            let bytes = 1u64 << k;
            let clean = s + t * bytes as f64;
            let mean = if k >= 21 {
                clean * (1.6 + rng.next_f64())
            } else {
                clean * (1.0 + 0.02 * rng.unit_noise())
            };
            point(bytes, mean)
        })
        .collect();
    let fit = profile::bench::fit_affine(points, 0.10).unwrap();
    assert_eq!(
        fit.excluded_sizes,
        vec![2 << 20, 4 << 20, 8 << 20, 16 << 20]
    );
    assert!(within(fit.setup_s, s, 0.05), "s {}", fit.setup_s);
    assert!(within(fit.per_byte_s, t, 0.05), "t {}", fit.per_byte_s);
    assert!(fit.r2 > 0.99);
}

#[test]
fn json_round_trip_and_clear_errors() {
    let (p, _) = sim_profile("wd-black-1tb-2011", 0.0, 1);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/profile.json");
    p.save(&path).unwrap();
    assert_eq!(DeviceProfile::load(&path).unwrap(), p);

    std::fs::write(&path, "{ not json").unwrap();
    let err = DeviceProfile::load(&path).unwrap_err();
    assert!(matches!(err, Error::InvalidOptions(_)), "{err}");
    assert!(
        err.to_string().contains("not a strata device profile"),
        "{err}"
    );

    let mut bad = p.clone();
    bad.affine.setup_s = -1.0;
    std::fs::write(&path, bad.to_json()).unwrap();
    let err = DeviceProfile::load(&path).unwrap_err();
    assert!(err.to_string().contains("affine.setup_s"), "{err}");

    let mut newer = p.clone();
    newer.version = profile::PROFILE_VERSION + 1;
    std::fs::write(&path, newer.to_json()).unwrap();
    assert!(DeviceProfile::load(&path)
        .unwrap_err()
        .to_string()
        .contains("newer"));

    let missing = DeviceProfile::load(&dir.path().join("none.json")).unwrap_err();
    assert!(missing.to_string().contains("none.json"), "{missing}");
}

#[test]
fn a_profile_configures_a_simulated_device_that_profiles_the_same() {
    let (p, _) = sim_profile("samsung-970-pro", 0.0, 2);
    let target = SimTarget::new("from profile", p.sim_model());
    let again = profile::profile(&target, &ProfileConfig::quick(), &Silent).unwrap();
    assert!(within(again.affine.setup_s, p.affine.setup_s, 0.01));
    assert!(within(again.affine.per_byte_s, p.affine.per_byte_s, 0.01));
    assert!(within(again.pdam.parallelism, p.pdam.parallelism, 0.02));
}

#[test]
fn scratch_file_checks() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = FileTarget::create(&missing, 64 << 20).err().unwrap();
    assert!(e.to_string().contains("does not exist"), "{e}");
    let e = FileTarget::create(dir.path(), 1 << 20).err().unwrap();
    assert!(e.to_string().contains("too small"), "{e}");
    let e = FileTarget::create(dir.path(), 1 << 60).err().unwrap();
    assert!(e.to_string().contains("free"), "{e}");
    // Nothing is left behind by the failures.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn the_plot_is_an_svg_with_every_point() {
    let (p, _) = sim_profile("samsung-860-pro", 0.0, 4);
    let svg = profile::plot::svg(&p);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let circles = svg.matches("<circle").count();
    assert_eq!(circles, p.affine.points.len() + p.pdam.points.len());
    // The DAM is drawn in both panels, beside the fitted models.
    assert_eq!(svg.matches(r#"stroke-dasharray="2 3""#).count(), 2);
}

fn pdam_points(times: &[(u32, f64)]) -> Vec<profile::PdamPoint> {
    times
        .iter()
        .map(|&(threads, completion_s)| profile::PdamPoint {
            threads,
            ios: 1000,
            elapsed_s: 1.0,
            bytes_per_s: threads as f64 * (10u64 << 30) as f64 / completion_s,
            completion_s,
            passes_bytes_per_s: Vec::new(),
        })
        .collect()
}

#[test]
fn p_is_the_knee_on_ideal_data_and_the_throughput_ratio_without_a_flat_region() {
    let block = 64 << 10;
    let per_thread = 10u64 << 30;
    // Ideal PDAM data: flat at 100 s up to P = 4, then through the origin.
    let ideal: Vec<(u32, f64)> = [1, 2, 4, 8, 16, 32, 64]
        .iter()
        .map(|&p| (p, 100.0 * (p as f64 / 4.0).max(1.0)))
        .collect();
    let f = profile::bench::fit_pdam(pdam_points(&ideal), block, per_thread).unwrap();
    assert!(
        within(f.parallelism, 4.0, 0.01) && within(f.knee, 4.0, 0.01),
        "{f:?}"
    );
    // A gradual rise with no flat part, like this machine's virtual disk: T(p) = 12 + 10p.
    let gradual: Vec<(u32, f64)> = [1, 2, 4, 8, 16, 32, 64]
        .iter()
        .map(|&p| (p, 12.0 + 10.0 * p as f64))
        .collect();
    let f = profile::bench::fit_pdam(pdam_points(&gradual), block, per_thread).unwrap();
    assert!(f.knee < 1.5, "knee {}", f.knee);
    // P is the saturated-to-single-thread throughput ratio, about 22 / 10.
    assert!(within(f.parallelism, 2.2, 0.15), "P {}", f.parallelism);
    // So the PDAM with that P predicts one thread's time and the saturated slope.
    let blocks = per_thread / block;
    let m = strata::model::Pdam::new(f.parallelism, block, f.step_s);
    assert!(within(m.threads_s(1, blocks), 22.0, 0.1));
    assert!(within(m.threads_s(64, blocks), 12.0 + 640.0, 0.1));
}

/// A throttled disk costs max(1/IOPS, x/bandwidth): 10 ms up to 1 MiB at 100 IOPS and 100 MB/s,
/// then 10 ns a byte. The robust fit keeps the flat small sizes and sets the large ones aside,
/// so its t is not the device's; the profile must say the model does not hold, and the tuner
/// must say so in its notes, while a profile whose fit reaches the large sizes holds.
#[test]
fn a_throttled_disk_is_named_as_not_following_the_affine_model() {
    let points = |cost: &dyn Fn(f64) -> f64| -> Vec<profile::AffinePoint> {
        (12..=24)
            .map(|k| {
                let bytes = 1u64 << k;
                let mean = cost(bytes as f64);
                point(bytes, mean)
            })
            .collect()
    };
    let (mut p, _) = sim_profile("wd-black-1tb-2011", 0.0, 1);
    assert!(p.affine_holds().is_ok(), "a preset's profile holds");
    let throttled = |x: f64| (1.0 / 100.0f64).max(x / 100e6) + 100e-6 + 1.2e-9 * x;
    p.affine = profile::bench::fit_affine(points(&throttled), 0.10).unwrap();
    let why = p.affine_holds().unwrap_err();
    assert!(
        why.contains("t is not measured") || why.contains("R²"),
        "{why}"
    );
    let r = strata::tune::recommend(&p, &strata::tune::Workload::new(10_000_000));
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("Warning:") && n.contains(&why)),
        "{:?}",
        r.notes
    );
    // The same disk without the throttle follows s + t·x, and its fit reaches past 2/α.
    let plain = |x: f64| 100e-6 + 1.2e-9 * x;
    p.affine = profile::bench::fit_affine(points(&plain), 0.10).unwrap();
    assert!(p.affine_holds().is_ok(), "{:?}", p.affine_holds());
}

/// The throttled preset, profiled end to end on the simulator: the profile finds the roofline
/// max(s, t·x), with s the IO floor and t the bandwidth's cost per byte (within 25%), reports
/// its R², and says the affine model does not hold, so `strata tune` warns.
#[test]
fn a_simulated_throttled_disk_is_profiled_as_a_roofline() {
    let (p, _) = sim_profile("throttled-100iops-100mbs", 0.03, 5);
    let a = &p.affine;
    assert_eq!(a.shape, profile::CostShape::Roofline, "{a:?}");
    assert!(within(a.setup_s, 0.01, 0.25), "s {}", a.setup_s);
    assert!(
        within(a.per_byte_s, 1.0 / 100e6, 0.25),
        "t {}",
        a.per_byte_s
    );
    assert!(a.r2 > 0.9, "R² {}", a.r2);
    assert!(a.excluded_sizes.is_empty(), "{:?}", a.excluded_sizes);
    let why = p.affine_holds().unwrap_err();
    assert!(why.contains("max(s, t·x)"), "{why}");
}
