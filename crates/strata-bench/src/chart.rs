//! Grouped bar charts on a log scale, as standalone SVG written by hand (no plotting
//! dependency): one group per category (an engine), one bar per series (a workload), like seed
//! 004's Figure 4.1. Values that are zero or missing draw no bar.

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

#[cfg(test)]
mod tests {
    use super::*;

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
