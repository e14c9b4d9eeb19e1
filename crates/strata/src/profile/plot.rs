//! The profile as a picture: an SVG written by hand (no plotting dependency) with two panels,
//! latency against IO size with the fitted affine line (log-log; sizes left out of the fit drawn
//! hollow and red), and completion time against threads with the two fitted segments, the PDAM
//! curve with the fitted P and a line at P (log-log, like seed 000's Figure 1). Both panels also
//! draw the DAM (`errors::ModelErrors`: blocks of 1/α at 2s each, no parallelism), dotted
//! orange, so the gap the refined models close is visible.
//!
//! Invariants: the output is a complete, standalone SVG document; empty point lists (a profile
//! made from models) still give valid axes.

use std::fmt::Write;

use super::DeviceProfile;
use crate::model::{CostModel, Dam};

/// The DAM's line in both panels.
const DAM_STYLE: &str = r##"stroke="#ff7f0e" stroke-width="1.2" stroke-dasharray="2 3""##;

const W: f64 = 520.0;
const H: f64 = 380.0;
const PAD_L: f64 = 70.0;
const PAD_R: f64 = 20.0;
const PAD_T: f64 = 50.0;
const PAD_B: f64 = 50.0;

/// A log-log panel at horizontal offset `ox`.
struct Panel {
    ox: f64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Panel {
    fn px(&self, x: f64) -> f64 {
        let (a, b) = (self.x.0.log10(), self.x.1.log10());
        self.ox + PAD_L + (x.log10() - a) / (b - a) * (W - PAD_L - PAD_R)
    }
    fn py(&self, y: f64) -> f64 {
        let (a, b) = (self.y.0.log10(), self.y.1.log10());
        H - PAD_B - (y.log10() - a) / (b - a) * (H - PAD_T - PAD_B)
    }
}

fn range(values: impl Iterator<Item = f64>, fallback: (f64, f64)) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    if lo.is_finite() && hi > lo {
        (lo / 1.5, hi * 1.5)
    } else if lo.is_finite() {
        (lo / 3.0, lo * 3.0)
    } else {
        fallback
    }
}

fn size_label(bytes: f64) -> String {
    if bytes >= (1 << 20) as f64 {
        format!("{:.0}M", bytes / (1 << 20) as f64)
    } else {
        format!("{:.0}K", bytes / 1024.0)
    }
}

fn time_label(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.0} s")
    } else if s >= 1e-3 {
        format!("{:.0} ms", s * 1e3)
    } else {
        format!("{:.0} µs", s * 1e6)
    }
}

fn frame(out: &mut String, p: &Panel, title: &str, xlabel: &str, ylabel: &str) {
    let (l, r, t, b) = (p.ox + PAD_L, p.ox + W - PAD_R, PAD_T, H - PAD_B);
    let _ = writeln!(
        out,
        r##"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        r - l,
        b - t
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{title}</text>"#,
        (l + r) / 2.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12">{xlabel}</text>"#,
        (l + r) / 2.0,
        H - 12.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12" transform="rotate(-90 {} {})">{ylabel}</text>"#,
        p.ox + 16.0,
        (t + b) / 2.0,
        p.ox + 16.0,
        (t + b) / 2.0
    );
    log_y_grid(out, p.y, (l, r), |v| p.py(v), "#ddd", time_label);
}

/// Grid lines across [l, r], each labelled left of the axis, at the 1-2-5 ticks of a log y
/// axis over `y` (`py` places a value).
pub fn log_y_grid(
    out: &mut String,
    y: (f64, f64),
    (l, r): (f64, f64),
    py: impl Fn(f64) -> f64,
    stroke: &str,
    label: impl Fn(f64) -> String,
) {
    for v in log_ticks(y.0, y.1) {
        let y = py(v);
        let _ = writeln!(
            out,
            r#"<line x1="{l}" y1="{y:.1}" x2="{r}" y2="{y:.1}" stroke="{stroke}"/><text x="{}" y="{:.1}" text-anchor="end" font-size="10">{}</text>"#,
            l - 4.0,
            y + 3.0,
            label(v)
        );
    }
}

/// Tick values for a log axis over [lo, hi]: 1, 2 and 5 times each power of ten in range.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut d = 10f64.powf(lo.log10().floor());
    while d <= hi {
        for m in [1.0, 2.0, 5.0] {
            let v = d * m;
            if v >= lo && v <= hi {
                ticks.push(v);
            }
        }
        d *= 10.0;
    }
    ticks
}

/// An unfilled SVG polyline through `pts`, drawn in `style` (attributes).
pub fn polyline(out: &mut String, pts: &[(f64, f64)], style: &str) {
    let coords: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" {style}/>"#,
        coords.join(" ")
    );
}

/// The SVG document for `p`.
pub fn svg(p: &DeviceProfile) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif">"#,
        2.0 * W,
        H
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);

    // Panel 1: affine.
    let a = &p.affine;
    let model = p.affine_model();
    let dam = Dam::from_affine(&model);
    let xr = range(
        a.points.iter().map(|q| q.bytes as f64),
        (4096.0, (16 << 20) as f64),
    );
    let yr = range(
        a.points.iter().map(|q| q.mean_s).chain([
            model.cost(xr.0 as u64),
            model.cost(xr.1 as u64),
            dam.io_s(xr.0 as u64),
            dam.io_s(xr.1 as u64),
        ]),
        (1e-5, 1.0),
    );
    let pa = Panel {
        ox: 0.0,
        x: xr,
        y: yr,
    };
    frame(
        &mut out,
        &pa,
        "Random reads, queue depth 1",
        "IO size",
        "mean latency",
    );
    let mut x = 4096.0;
    while x <= pa.x.1 {
        if x >= pa.x.0 {
            let px = pa.px(x);
            let _ = writeln!(
                out,
                r#"<text x="{px:.1}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
                H - PAD_B + 14.0,
                size_label(x)
            );
        }
        x *= 4.0;
    }
    let line: Vec<(f64, f64)> = (0..=100)
        .map(|i| {
            let x = pa.x.0 * (pa.x.1 / pa.x.0).powf(i as f64 / 100.0);
            (pa.px(x), pa.py(model.cost(x as u64)))
        })
        .collect();
    polyline(&mut out, &line, r##"stroke="#1f77b4" stroke-width="1.5""##);
    // The DAM's staircase: enough samples that each step of 1/α shows.
    let steps: Vec<(f64, f64)> = (0..=400)
        .map(|i| {
            let x = pa.x.0 * (pa.x.1 / pa.x.0).powf(i as f64 / 400.0);
            (pa.px(x), pa.py(dam.io_s(x as u64)))
        })
        .collect();
    polyline(&mut out, &steps, DAM_STYLE);
    for q in &a.points {
        let (cx, cy) = (pa.px(q.bytes as f64), pa.py(q.mean_s));
        let style = if q.fitted {
            r##"fill="#1f77b4""##
        } else {
            r##"fill="none" stroke="#d62728" stroke-width="1.5""##
        };
        let _ = writeln!(out, r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="4" {style}/>"#);
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="11">s = {:.1} µs, t = {:.3} ns/B, 1/α = {:.0} KiB, R² = {:.4}</text>"#,
        PAD_L + 8.0,
        PAD_T + 16.0,
        a.setup_s * 1e6,
        a.per_byte_s * 1e9,
        a.half_bandwidth_bytes / 1024.0,
        a.r2
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" font-size="11" fill="#ff7f0e">dotted: DAM, blocks of 1/α at 2s</text>"##,
        PAD_L + 8.0,
        PAD_T + 30.0
    );
    if !a.excluded_sizes.is_empty() {
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" font-size="11" fill="#d62728">hollow: off the line, not fitted</text>"##,
            PAD_L + 8.0,
            PAD_T + 44.0
        );
    }

    // Panel 2: PDAM.
    let d = &p.pdam;
    let xr = range(d.points.iter().map(|q| q.threads as f64), (1.0, 64.0));
    let xr = (xr.0.max(0.7), xr.1);
    let blocks = d.per_thread_bytes / d.block_bytes.max(1);
    // The DAM serves the p threads' reads one after another.
    let dam_threads = |t: f64| t * blocks as f64 * dam.io_s(d.block_bytes);
    let yr = range(
        d.points.iter().map(|q| q.completion_s).chain([
            d.fit.predict(xr.0),
            d.fit.predict(xr.1),
            dam_threads(xr.0),
            dam_threads(xr.1),
        ]),
        (1.0, 1000.0),
    );
    let pp = Panel {
        ox: W,
        x: xr,
        y: yr,
    };
    frame(
        &mut out,
        &pp,
        &format!(
            "Each thread reads {} GiB in {} KiB blocks",
            d.per_thread_bytes >> 30,
            d.block_bytes >> 10
        ),
        "threads p",
        "completion time",
    );
    let mut t = 1.0;
    while t <= pp.x.1 {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="10">{t:.0}</text>"#,
            pp.px(t),
            H - PAD_B + 14.0
        );
        t *= 2.0;
    }
    let seg: Vec<(f64, f64)> = (0..=200)
        .map(|i| {
            let x = pp.x.0 * (pp.x.1 / pp.x.0).powf(i as f64 / 200.0);
            (pp.px(x), pp.py(d.fit.predict(x).max(pp.y.0)))
        })
        .collect();
    polyline(&mut out, &seg, r##"stroke="#2ca02c" stroke-width="1.5""##);
    // The PDAM model itself, L·max(1, p/P): the segments when the data is ideal.
    let pdam = p.pdam_model();
    let model: Vec<(f64, f64)> = (0..=200)
        .map(|i| {
            let x = pp.x.0 * (pp.x.1 / pp.x.0).powf(i as f64 / 200.0);
            let y = blocks as f64 * (x / pdam.parallelism).max(1.0) * pdam.step_s;
            (pp.px(x), pp.py(y.max(pp.y.0)))
        })
        .collect();
    polyline(
        &mut out,
        &model,
        r##"stroke="#888" stroke-width="1" stroke-dasharray="5 3""##,
    );
    let dam_line: Vec<(f64, f64)> = [pp.x.0, pp.x.1]
        .iter()
        .map(|&x| (pp.px(x), pp.py(dam_threads(x))))
        .collect();
    polyline(&mut out, &dam_line, DAM_STYLE);
    let bx = pp.px(d.parallelism.clamp(pp.x.0, pp.x.1));
    let _ = writeln!(
        out,
        r##"<line x1="{bx:.1}" y1="{PAD_T}" x2="{bx:.1}" y2="{}" stroke="#2ca02c" stroke-dasharray="4 3"/>"##,
        H - PAD_B
    );
    for q in &d.points {
        let _ = writeln!(
            out,
            r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="#2ca02c"/>"##,
            pp.px(q.threads as f64),
            pp.py(q.completion_s)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="11">P = {:.2}, saturation {:.0} MiB/s, R² = {:.4}</text>"#,
        W + PAD_L + 8.0,
        PAD_T + 16.0,
        d.parallelism,
        d.saturation_bytes_per_s / (1 << 20) as f64,
        d.r2
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" font-size="11" fill="#666">green: segmented fit; grey dashed: PDAM with P; dotted orange: DAM</text>"##,
        W + PAD_L + 8.0,
        PAD_T + 30.0
    );
    out.push_str("</svg>\n");
    out
}
