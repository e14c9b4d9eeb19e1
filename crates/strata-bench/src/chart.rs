//! Charts as standalone SVG written by hand (no plotting dependency):
//! - `log_bars`: grouped bars on a log scale, one group per category (an engine), one bar per
//!   series (a workload), like seed 004's Figure 4.1. Values that are zero or missing draw no
//!   bar.
//! - `log_lines_panels`: panels side by side, each a linear x axis against a log y axis with
//!   one line of points per series (an engine) and an optional marked x (the memory size),
//!   like seed 003's Figures 3 and 4. Points that are not positive are left out.

use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 400.0;
const PAD_L: f64 = 80.0;
const PAD_R: f64 = 20.0;
const PAD_T: f64 = 56.0;
const PAD_B: f64 = 70.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A compact label for a tick: 1K, 10K, 1M, ...
fn tick_label(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.0}G", v / 1e9),
        v if v >= 1e6 => format!("{:.0}M", v / 1e6),
        v if v >= 1e3 => format!("{:.0}K", v / 1e3),
        v if v >= 1.0 => format!("{v:.0}"),
        v => format!("{v}"),
    }
}

/// `series[s].1[g]` is the value of series s in group g.
pub fn log_bars(
    title: &str,
    y_label: &str,
    groups: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let values = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let (lo, hi) = if lo.is_finite() {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
        )
    } else {
        (1.0, 10.0)
    };
    let plot_h = H - PAD_T - PAD_B;
    let py = |v: f64| H - PAD_B - (v.log10() - lo.log10()) / (hi.log10() - lo.log10()) * plot_h;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    // Decades as grid lines.
    let mut decade = lo;
    while decade <= hi * 1.0001 {
        let y = py(decade);
        let _ = write!(
            s,
            r##"<line x1="{PAD_L}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - PAD_R,
            PAD_L - 6.0,
            y + 4.0,
            tick_label(decade)
        );
        decade *= 10.0;
    }
    let _ = write!(
        s,
        r#"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        PAD_T + plot_h / 2.0,
        escape(y_label)
    );
    let group_w = (W - PAD_L - PAD_R) / groups.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    for (g, name) in groups.iter().enumerate() {
        let gx = PAD_L + g as f64 * group_w + group_w * 0.1;
        for (k, (_, vals)) in series.iter().enumerate() {
            let Some(&v) = vals.get(g) else { continue };
            if !(v.is_finite() && v > 0.0) {
                continue;
            }
            let y = py(v);
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {}: {v:.0}</title></rect>"#,
                gx + k as f64 * bar_w,
                bar_w * 0.92,
                H - PAD_B - y,
                COLOURS[k % COLOURS.len()],
                escape(name),
                escape(&series[k].0)
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            gx + group_w * 0.4,
            H - PAD_B + 18.0,
            escape(name)
        );
    }
    for (k, (label, _)) in series.iter().enumerate() {
        let x = PAD_L + k as f64 * 130.0;
        let _ = write!(
            s,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            H - 26.0,
            COLOURS[k % COLOURS.len()],
            x + 16.0,
            H - 16.0,
            escape(label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// One panel of `log_lines_panels`: `series[s].1` holds series s's (x, y) points.
pub struct LinePanel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// A dashed vertical line at this x, labelled.
    pub x_marker: Option<(f64, String)>,
}

const LW: f64 = 460.0;
const LH: f64 = 340.0;

/// Panels side by side, a shared legend of the first panel's series below.
pub fn log_lines_panels(panels: &[LinePanel]) -> String {
    let w = LW * panels.len().max(1) as f64;
    let legend_rows = panels.first().map_or(0, |p| p.series.len());
    let h = LH + 10.0 + 16.0 * legend_rows as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    for (i, p) in panels.iter().enumerate() {
        line_panel(&mut s, p, i as f64 * LW);
    }
    if let Some(p) = panels.first() {
        for (k, (label, _)) in p.series.iter().enumerate() {
            let y = LH + 8.0 + 16.0 * k as f64;
            let c = COLOURS[k % COLOURS.len()];
            let _ = write!(
                s,
                r#"<line x1="{PAD_L}" x2="{}" y1="{y}" y2="{y}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
                PAD_L + 24.0,
                PAD_L + 30.0,
                y + 4.0,
                escape(label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

fn line_panel(s: &mut String, p: &LinePanel, ox: f64) {
    let pts = || {
        p.series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|(x, y)| x.is_finite() && y.is_finite() && *y > 0.0)
    };
    let x_hi = pts()
        .map(|(x, _)| x)
        .chain(p.x_marker.iter().map(|m| m.0))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.05;
    let (lo, hi) = pts().fold((f64::INFINITY, 0.0f64), |(l, h), (_, y)| {
        (l.min(y), h.max(y))
    });
    let (lo, hi) = if lo.is_finite() {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
        )
    } else {
        (1.0, 10.0)
    };
    let (l, r, t, b) = (ox + PAD_L, ox + LW - PAD_R, PAD_T, LH - PAD_B);
    let px = |x: f64| l + x / x_hi * (r - l);
    let py = |y: f64| b - (y.log10() - lo.log10()) / (hi.log10() - lo.log10()) * (b - t);
    let _ = write!(
        s,
        r##"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        r - l,
        b - t
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">{}</text>"#,
        (l + r) / 2.0,
        escape(&p.title)
    );
    let mut decade = lo;
    while decade <= hi * 1.0001 {
        let y = py(decade);
        let _ = write!(
            s,
            r##"<line x1="{l}" x2="{r}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            l - 6.0,
            y + 4.0,
            tick_label(decade)
        );
        decade *= 10.0;
    }
    for i in 0..=4 {
        let x = x_hi * i as f64 / 4.0;
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            px(x),
            b + 16.0,
            if x >= 10.0 {
                format!("{x:.0}")
            } else {
                format!("{x:.1}")
            }
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        (l + r) / 2.0,
        b + 34.0,
        escape(&p.x_label)
    );
    let _ = write!(
        s,
        r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">{}</text>"#,
        ox + 16.0,
        (t + b) / 2.0,
        escape(&p.y_label)
    );
    if let Some((x, label)) = &p.x_marker {
        let _ = write!(
            s,
            r##"<line class="marker" x1="{0:.1}" x2="{0:.1}" y1="{t}" y2="{b}" stroke="#888" stroke-dasharray="4 3"/><text x="{1:.1}" y="{2}" fill="#666">{3}</text>"##,
            px(*x),
            px(*x) + 4.0,
            t + 14.0,
            escape(label)
        );
    }
    for (k, (label, v)) in p.series.iter().enumerate() {
        let c = COLOURS[k % COLOURS.len()];
        let coords: Vec<String> = v
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && *y > 0.0)
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline class="series" points="{}" fill="none" stroke="{c}" stroke-width="2"><title>{}</title></polyline>"#,
            coords.join(" "),
            escape(label)
        );
        for xy in &coords {
            let (x, y) = xy.split_once(',').expect("x,y");
            let _ = write!(s, r#"<circle cx="{x}" cy="{y}" r="3" fill="{c}"/>"#);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_panels_draw_each_series_and_skip_what_a_log_axis_cannot_show() {
        let svg = log_lines_panels(&[
            LinePanel {
                title: "puts <a>".into(),
                x_label: "MiB".into(),
                y_label: "ops/s".into(),
                series: vec![
                    ("x".into(), vec![(1.0, 100.0), (2.0, 0.0), (3.0, 5000.0)]),
                    ("y".into(), vec![(1.0, 20.0)]),
                ],
                x_marker: Some((1.5, "memory".into())),
            },
            LinePanel {
                title: "empty".into(),
                x_label: "MiB".into(),
                y_label: "ops/s".into(),
                series: Vec::new(),
                x_marker: None,
            },
        ]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("puts &lt;a&gt;"));
        assert_eq!(svg.matches(r#"class="series""#).count(), 2);
        // The zero is left out: three points drawn of four.
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches(r#"class="marker""#).count(), 1);
        for tick in [">10<", ">100<", ">1K<", ">10K<"] {
            assert!(svg.contains(tick), "missing {tick}");
        }
    }

    #[test]
    fn bars_are_drawn_for_positive_values_only() {
        let svg = log_bars(
            "t <1>",
            "ops/s",
            &["a".into(), "b".into()],
            &[
                ("write".into(), vec![1000.0, 0.0]),
                ("read".into(), vec![50_000.0, 2_000_000.0]),
            ],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<title>").count(), 3);
        assert!(svg.contains("t &lt;1&gt;"));
        // Decades from 1K to 10M.
        for tick in [">1K<", ">10K<", ">100K<", ">1M<", ">10M<"] {
            assert!(svg.contains(tick), "missing {tick}");
        }
        let empty = log_bars("none", "ops/s", &[], &[]);
        assert!(empty.ends_with("</svg>\n"));
    }
}
