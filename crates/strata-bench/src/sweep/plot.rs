//! The sweep as a picture: a standalone SVG written by hand (no plotting dependency), in the
//! manner of `strata::profile::plot`. One log-log panel per operation (random insert, point
//! query, mixed), µs per operation against node size. Per tree: the measured points joined by a
//! solid line (class `measured`), the model's curve dashed in the same colour (`predicted`), the
//! measured best ringed (`measured-best`) and the tuner's pick marked by a triangle on the axis
//! and a dotted line (`tuner-pick`), or by an arrow at the edge when it lies outside the swept
//! range (`tuner-pick-outside`). The classes also name the tree, so tests can find each mark.

use std::fmt::Write as _;

use super::{human, Op, Report, Tree};
use strata::profile::plot::{log_y_grid, polyline};

const PW: f64 = 440.0;
const PH: f64 = 360.0;
const PAD_L: f64 = 64.0;
const PAD_R: f64 = 16.0;
const PAD_T: f64 = 48.0;
const PAD_B: f64 = 64.0;

fn colour(tree: Tree) -> &'static str {
    match tree {
        Tree::BTree => "#1f77b4",
        Tree::BeTree => "#d62728",
    }
}

struct Panel {
    ox: f64,
    x: (f64, f64),
    y: (f64, f64),
}

impl Panel {
    fn px(&self, x: f64) -> f64 {
        let (a, b) = (self.x.0.log10(), self.x.1.log10());
        self.ox + PAD_L + (x.log10() - a) / (b - a) * (PW - PAD_L - PAD_R)
    }

    fn py(&self, y: f64) -> f64 {
        let (a, b) = (self.y.0.log10(), self.y.1.log10());
        PH - PAD_B - (y.clamp(self.y.0, self.y.1).log10() - a) / (b - a) * (PH - PAD_T - PAD_B)
    }
}

fn us_label(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.0} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn short_size(bytes: f64) -> String {
    if bytes >= (1 << 20) as f64 {
        format!("{:.0}M", bytes / (1 << 20) as f64)
    } else {
        format!("{:.0}K", bytes / 1024.0)
    }
}

fn panel(out: &mut String, r: &Report, op: Op, ox: f64) {
    let values = r
        .points
        .iter()
        .flat_map(|p| [p.measured(op), p.predicted(op)])
        .chain(r.curve.iter().map(|c| c.predicted.of(op)))
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let (lo, hi) = if lo.is_finite() && hi > lo {
        (lo / 1.5, hi * 1.5)
    } else {
        (1.0, 1e5)
    };
    let largest = r
        .curve
        .iter()
        .map(|c| c.node_bytes)
        .max()
        .unwrap_or(r.config.max_node);
    let xr = (r.config.min_node as f64 / 1.4, largest as f64 * 1.4);
    let p = Panel {
        ox,
        x: xr,
        y: (lo, hi),
    };
    let (l, rt, t, b) = (ox + PAD_L, ox + PW - PAD_R, PAD_T, PH - PAD_B);
    let _ = writeln!(
        out,
        r##"<rect x="{l}" y="{t}" width="{}" height="{}" fill="none" stroke="#444"/>"##,
        rt - l,
        b - t
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        (l + rt) / 2.0,
        op.label()
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="12">node size</text>"#,
        (l + rt) / 2.0,
        PH - PAD_B + 30.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{x}" y="{y}" text-anchor="middle" font-size="12" transform="rotate(-90 {x} {y})">µs per operation</text>"#,
        x = ox + 14.0,
        y = (t + b) / 2.0
    );
    // 1-2-5 ticks on y, node-size ticks on x.
    log_y_grid(out, p.y, (l, rt), |v| p.py(v), "#e4e4e4", us_label);
    let mut x = r.config.min_node;
    while x <= largest {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
            p.px(x as f64),
            b + 14.0,
            short_size(x as f64)
        );
        x *= 2;
    }
    for s in &r.trees {
        let tree = s.tree;
        let c = colour(tree);
        let name = tree.name();
        let model: Vec<(f64, f64)> = r
            .curve
            .iter()
            .filter(|q| q.tree == tree)
            .map(|q| (p.px(q.node_bytes as f64), p.py(q.predicted.of(op))))
            .collect();
        polyline(
            out,
            &model,
            &format!(
                r#"class="predicted {name}" stroke="{c}" stroke-width="1.2" stroke-dasharray="5 3""#
            ),
        );
        let measured: Vec<(f64, f64)> = r
            .points_of(tree)
            .map(|q| (p.px(q.node_bytes as f64), p.py(q.measured(op))))
            .collect();
        polyline(
            out,
            &measured,
            &format!(r#"class="measured {name}" stroke="{c}" stroke-width="1.8""#),
        );
        for (x, y) in &measured {
            let _ = writeln!(
                out,
                r#"<circle class="point {name}" cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{c}"/>"#
            );
        }
        let best = s.best(op);
        if let Some(q) = r
            .points_of(tree)
            .find(|q| q.node_bytes == best.measured_best_node)
        {
            let _ = writeln!(
                out,
                r#"<circle class="measured-best {name}" cx="{:.1}" cy="{:.1}" r="8" fill="none" stroke="{c}" stroke-width="2"/>"#,
                p.px(q.node_bytes as f64),
                p.py(q.measured(op))
            );
        }
        if !s.tuner.in_sweep {
            // Off the axis: an arrow at the edge it lies beyond, with its size.
            let right = s.tuner.node_bytes > largest;
            let (ax, dir, anchor) = if right {
                (rt - 4.0, 1.0, "end")
            } else {
                (l + 4.0, -1.0, "start")
            };
            // Below the axis, clear of the points, one row per tree.
            let ay = b + 42.0 + 12.0 * (tree == Tree::BeTree) as u8 as f64;
            let _ = writeln!(
                out,
                r#"<g class="tuner-pick-outside {name}"><polygon points="{:.1},{ay:.1} {:.1},{:.1} {:.1},{:.1}" fill="{c}"/><text x="{:.1}" y="{:.1}" text-anchor="{anchor}" font-size="10" fill="{c}">tuner: {}</text></g>"#,
                ax + dir * 4.0,
                ax - dir * 4.0,
                ay - 5.0,
                ax - dir * 4.0,
                ay + 5.0,
                ax - dir * 8.0,
                ay + 3.0,
                human(s.tuner.node_bytes)
            );
        } else {
            let tx = p.px(s.tuner.node_bytes as f64);
            let _ = writeln!(
                out,
                r#"<g class="tuner-pick {name}"><line x1="{tx:.1}" y1="{t}" x2="{tx:.1}" y2="{b}" stroke="{c}" stroke-width="1" stroke-dasharray="1 3"/><polygon points="{:.1},{:.1} {:.1},{b} {:.1},{b}" fill="{c}"/></g>"#,
                tx,
                b - 10.0,
                tx - 6.0,
                tx + 6.0
            );
        }
    }
}

/// The sweep as a standalone SVG document: three panels (random insert, point query, mixed) and
/// a legend naming the profile the model was priced with.
pub fn svg(r: &Report) -> String {
    let mut out = String::new();
    let w = 3.0 * PW;
    let h = PH + 56.0;
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, op) in Op::ALL.iter().enumerate() {
        panel(&mut out, r, *op, i as f64 * PW);
    }
    let mut y = PH + 4.0;
    let mut x = PAD_L;
    for s in &r.trees {
        let c = colour(s.tree);
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{c}" stroke-width="1.8"/><text x="{}" y="{}" font-size="11">{} measured</text>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            s.tree.label()
        );
        let _ = writeln!(
            out,
            r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{c}" stroke-dasharray="5 3"/><text x="{}" y="{}" font-size="11">{} model</text>"#,
            x + 150.0,
            x + 174.0,
            x + 180.0,
            y + 4.0,
            s.tree.label()
        );
        y += 16.0;
    }
    let _ = writeln!(
        out,
        r##"<text x="{}" y="{}" font-size="11" fill="#444">ring: measured best; triangle and dotted line: the tuner's pick (mixed workload)</text>"##,
        x + 330.0,
        PH + 8.0
    );
    x += 330.0;
    let _ = writeln!(
        out,
        r##"<text x="{x}" y="{}" font-size="11" fill="#444">model priced with {}: s = {:.1} µs, t = {:.3} ns/B; {} records, {} cache, O_DIRECT</text>"##,
        PH + 24.0,
        xml_escape(&r.profile.source),
        r.profile.setup_us,
        r.profile.per_byte_ns,
        r.config.records,
        human(r.config.cache_bytes)
    );
    out.push_str("</svg>\n");
    out
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
