//! Fitting the models to measurements: ordinary and weighted least squares with R², a robust
//! line fit that finds where a cost curve stops being a line (the affine benchmark's "sizes where
//! the model holds"), and segmented linear regression with a breakpoint search (the PDAM
//! benchmark's P).
//!
//! Invariants: every fit returns `None` rather than a NaN when the data cannot determine it (too
//! few points, all x equal, non-finite input); weights are relative (only their ratios matter);
//! R² is always the plain, unweighted coefficient of determination of the returned curve on the
//! points it was fitted to, so it reads the same whichever weights produced the curve.

use serde::{Deserialize, Serialize};

/// y = intercept + slope·x.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinearFit {
    pub intercept: f64,
    pub slope: f64,
    /// Unweighted R² on the fitted points.
    pub r2: f64,
    pub n: usize,
}

impl LinearFit {
    pub fn predict(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

fn finite(v: &[f64]) -> bool {
    v.iter().all(|x| x.is_finite())
}

/// 1 − SS_res / SS_tot over the points, unweighted. A constant y that the curve hits exactly has
/// R² 1; one it misses has R² 0.
pub fn r_squared(ys: &[f64], predicted: impl Fn(usize) -> f64) -> f64 {
    let n = ys.len() as f64;
    let mean = ys.iter().sum::<f64>() / n;
    let ss_tot: f64 = ys.iter().map(|y| (y - mean).powi(2)).sum();
    let ss_res: f64 = ys
        .iter()
        .enumerate()
        .map(|(i, y)| (y - predicted(i)).powi(2))
        .sum();
    if ss_tot == 0.0 {
        return if ss_res <= 1e-24 * (1.0 + mean * mean) {
            1.0
        } else {
            0.0
        };
    }
    1.0 - ss_res / ss_tot
}

/// Ordinary least squares.
pub fn ols(xs: &[f64], ys: &[f64]) -> Option<LinearFit> {
    wls(xs, ys, &vec![1.0; xs.len()])
}

/// Weighted least squares: minimises Σ wᵢ (yᵢ − a − b·xᵢ)². Centred sums keep it well conditioned
/// when x spans bytes (4 KiB .. 16 MiB) and y spans seconds.
pub fn wls(xs: &[f64], ys: &[f64], ws: &[f64]) -> Option<LinearFit> {
    if xs.len() != ys.len() || xs.len() != ws.len() || xs.len() < 2 {
        return None;
    }
    if !finite(xs) || !finite(ys) || !finite(ws) || ws.iter().any(|&w| w < 0.0) {
        return None;
    }
    let sw: f64 = ws.iter().sum();
    if sw <= 0.0 {
        return None;
    }
    let xm = xs.iter().zip(ws).map(|(x, w)| x * w).sum::<f64>() / sw;
    let ym = ys.iter().zip(ws).map(|(y, w)| y * w).sum::<f64>() / sw;
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for ((x, y), w) in xs.iter().zip(ys).zip(ws) {
        sxx += w * (x - xm) * (x - xm);
        sxy += w * (x - xm) * (y - ym);
    }
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = ym - slope * xm;
    let r2 = r_squared(ys, |i| intercept + slope * xs[i]);
    Some(LinearFit {
        intercept,
        slope,
        r2,
        n: xs.len(),
    })
}

/// Weighted least squares on an arbitrary basis: minimises Σ wᵢ (yᵢ − Σⱼ βⱼ·colⱼ\[i\])². Normal
/// equations solved by Gaussian elimination with partial pivoting; fine for the 2–3 columns used
/// here. `None` when the basis is singular on the data.
pub fn lstsq(cols: &[Vec<f64>], ys: &[f64], ws: &[f64]) -> Option<Vec<f64>> {
    let k = cols.len();
    let n = ys.len();
    if k == 0 || n < k || cols.iter().any(|c| c.len() != n) || ws.len() != n {
        return None;
    }
    let mut a = vec![vec![0.0; k + 1]; k];
    for i in 0..k {
        for j in 0..k {
            a[i][j] = (0..n).map(|r| ws[r] * cols[i][r] * cols[j][r]).sum();
        }
        a[i][k] = (0..n).map(|r| ws[r] * cols[i][r] * ys[r]).sum();
    }
    let scale = (0..k).map(|i| a[i][i].abs()).fold(0.0, f64::max);
    for col in 0..k {
        let piv = (col..k).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[piv][col].abs() <= 1e-12 * scale {
            return None;
        }
        a.swap(col, piv);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let beta: Vec<f64> = (0..k).map(|i| a[i][k] / a[i][i]).collect();
    finite(&beta).then_some(beta)
}

/// A line fitted robustly, with the points it fits and the ones it rejects.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RobustFit {
    pub fit: LinearFit,
    /// Whether each point (in input order) is within `tolerance` of the fit.
    pub inliers: Vec<bool>,
    /// (y − ŷ) / ŷ for every point, against the final fit.
    pub rel_residuals: Vec<f64>,
    /// The relative residual beyond which a point is an outlier.
    pub tolerance: f64,
}

/// Fit a cost curve y = a + b·x (a > 0, b ≥ 0) to points of which some may not follow it, and say
/// which ones do.
///
/// 1. Least median of squares on relative residuals: for every pair of points take the line
///    through them (if physical: a > 0, b ≥ 0) and keep the one whose median |relative residual|
///    is smallest. This survives up to half the points being off the line, wherever they are.
/// 2. Points within max(`floor`, 2.5 robust standard deviations) of that line are inliers.
/// 3. Refit the inliers by weighted least squares with weights 1/y² (relative error, so a 16 MiB
///    read does not outweigh a 4 KiB one a thousand times), recompute the residuals, reclassify
///    once, and refit.
pub fn robust_line(xs: &[f64], ys: &[f64], floor: f64) -> Option<RobustFit> {
    let n = xs.len();
    if n != ys.len() || n < 2 || !finite(xs) || !finite(ys) || ys.iter().any(|&y| y <= 0.0) {
        return None;
    }
    let rel = |a: f64, b: f64| -> Vec<f64> {
        xs.iter()
            .zip(ys)
            .map(|(&x, &y)| {
                let p = a + b * x;
                (y - p) / p
            })
            .collect()
    };
    let median_abs = |r: &[f64]| -> f64 {
        let mut v: Vec<f64> = r.iter().map(|x| x.abs()).collect();
        v.sort_by(f64::total_cmp);
        let m = v.len();
        if m % 2 == 1 {
            v[m / 2]
        } else {
            0.5 * (v[m / 2 - 1] + v[m / 2])
        }
    };
    let mut best: Option<(f64, f64, f64)> = None; // (median, a, b)
    if n >= 4 {
        for i in 0..n {
            for j in i + 1..n {
                if xs[i] == xs[j] {
                    continue;
                }
                let b = (ys[j] - ys[i]) / (xs[j] - xs[i]);
                let a = ys[i] - b * xs[i];
                if a <= 0.0 || b < 0.0 {
                    continue;
                }
                let med = median_abs(&rel(a, b));
                if best.is_none_or(|(m, _, _)| med < m) {
                    best = Some((med, a, b));
                }
            }
        }
    }
    let weights = |mask: &[bool]| -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let mut out = (Vec::new(), Vec::new(), Vec::new());
        for i in (0..n).filter(|&i| mask[i]) {
            out.0.push(xs[i]);
            out.1.push(ys[i]);
            out.2.push(1.0 / (ys[i] * ys[i]));
        }
        out
    };
    let (tolerance, mut inliers) = match best {
        Some((med, a, b)) => {
            // Rousseeuw's consistency factor turns the median into a standard deviation.
            let sigma = 1.4826 * (1.0 + 5.0 / (n as f64 - 2.0)) * med;
            let tol = (2.5 * sigma).max(floor);
            (tol, rel(a, b).iter().map(|r| r.abs() <= tol).collect())
        }
        None => (floor, vec![true; n]),
    };
    let mut fit = None;
    for _ in 0..2 {
        if inliers.iter().filter(|&&k| k).count() < 2 {
            inliers = vec![true; n];
        }
        let (x, y, w) = weights(&inliers);
        let f = wls(&x, &y, &w)?;
        let r = rel(f.intercept, f.slope);
        inliers = r.iter().map(|r| r.abs() <= tolerance).collect();
        fit = Some(f);
    }
    if inliers.iter().filter(|&&k| k).count() < 2 {
        inliers = vec![true; n];
    }
    let (x, y, w) = weights(&inliers);
    let f = wls(&x, &y, &w).or(fit)?;
    Some(RobustFit {
        rel_residuals: rel(f.intercept, f.slope),
        fit: f,
        inliers,
        tolerance,
    })
}

/// The shape of a two-segment fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hinge {
    /// Flat, then linear: y = a + b·max(0, x − c). The PDAM's shape (time constant up to P
    /// threads, then growing linearly).
    FlatFirst,
    /// Two lines of any slopes meeting at c: y = a + b₁·x + (b₂ − b₁)·max(0, x − c).
    Free,
}

/// A continuous two-segment line with its breakpoint.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SegmentedFit {
    pub hinge: Hinge,
    pub breakpoint: f64,
    /// Value of the first segment at x = 0.
    pub intercept: f64,
    pub slope_before: f64,
    pub slope_after: f64,
    /// Unweighted R² on the fitted points.
    pub r2: f64,
}

impl SegmentedFit {
    pub fn predict(&self, x: f64) -> f64 {
        let at_break = self.intercept + self.slope_before * self.breakpoint;
        if x <= self.breakpoint {
            self.intercept + self.slope_before * x
        } else {
            at_break + self.slope_after * (x - self.breakpoint)
        }
    }
}

/// Fit a fixed breakpoint: the coefficients and the weighted residual sum of squares.
fn fit_at(xs: &[f64], ys: &[f64], ws: &[f64], hinge: Hinge, c: f64) -> Option<(SegmentedFit, f64)> {
    let ones = vec![1.0; xs.len()];
    let h: Vec<f64> = xs.iter().map(|&x| (x - c).max(0.0)).collect();
    let (a, b1, b2) = match hinge {
        Hinge::FlatFirst => {
            let beta = lstsq(&[ones, h], ys, ws)?;
            (beta[0], 0.0, beta[1])
        }
        Hinge::Free => {
            let beta = lstsq(&[ones, xs.to_vec(), h], ys, ws)?;
            (beta[0], beta[1], beta[2])
        }
    };
    let f = SegmentedFit {
        hinge,
        breakpoint: c,
        intercept: a,
        slope_before: b1,
        slope_after: b1 + b2,
        r2: 0.0,
    };
    let sse = xs
        .iter()
        .zip(ys)
        .zip(ws)
        .map(|((&x, &y), &w)| w * (y - f.predict(x)).powi(2))
        .sum();
    Some((f, sse))
}

/// Segmented linear regression with one breakpoint: search the breakpoint over a fine grid
/// between the data's x values (geometric when x > 0, as thread counts 1, 2, 4, .. are), refine
/// it by golden-section search around the best grid point, and return the fit of least weighted
/// squared error. `ws` None means equal weights. The breakpoint is kept where both segments are
/// determined: from the smallest x to the second-largest (FlatFirst), or from the second-smallest
/// to the second-largest (Free).
pub fn segmented(xs: &[f64], ys: &[f64], ws: Option<&[f64]>, hinge: Hinge) -> Option<SegmentedFit> {
    let n = xs.len();
    let ws: Vec<f64> = ws.map_or_else(|| vec![1.0; n], <[f64]>::to_vec);
    if n != ys.len() || n != ws.len() || !finite(xs) || !finite(ys) {
        return None;
    }
    let mut ux: Vec<f64> = xs.to_vec();
    ux.sort_by(f64::total_cmp);
    ux.dedup();
    let need = match hinge {
        Hinge::FlatFirst => 3,
        Hinge::Free => 4,
    };
    if ux.len() < need {
        return None;
    }
    let lo = match hinge {
        Hinge::FlatFirst => ux[0],
        Hinge::Free => ux[1],
    };
    let hi = ux[ux.len() - 2];
    let geometric = lo > 0.0;
    let at = |u: f64| -> f64 {
        if geometric {
            lo * (hi / lo).powf(u)
        } else {
            lo + (hi - lo) * u
        }
    };
    let sse = |u: f64| fit_at(xs, ys, &ws, hinge, at(u)).map_or(f64::INFINITY, |(_, e)| e);
    const GRID: usize = 512;
    let (mut best_u, mut best_e) = (0.0, f64::INFINITY);
    for i in 0..=GRID {
        let u = i as f64 / GRID as f64;
        let e = sse(u);
        if e < best_e {
            (best_u, best_e) = (u, e);
        }
    }
    // Golden-section search in the two grid cells around the best point.
    let step = 1.0 / GRID as f64;
    let (mut a, mut b) = ((best_u - step).max(0.0), (best_u + step).min(1.0));
    let g = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..80 {
        let (c, d) = (b - g * (b - a), a + g * (b - a));
        if sse(c) < sse(d) {
            b = d;
        } else {
            a = c;
        }
    }
    let mid = 0.5 * (a + b);
    let u = if sse(mid) < best_e { mid } else { best_u };
    let (mut f, _) = fit_at(xs, ys, &ws, hinge, at(u))?;
    f.r2 = r_squared(ys, |i| f.predict(xs[i]));
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ols_exact_line_has_r2_one() {
        let xs = [1.0, 2.0, 3.0, 4.0];
        let ys: Vec<f64> = xs.iter().map(|x| 2.0 + 0.5 * x).collect();
        let f = ols(&xs, &ys).unwrap();
        assert!((f.intercept - 2.0).abs() < 1e-12 && (f.slope - 0.5).abs() < 1e-12);
        assert!((f.r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn degenerate_inputs_give_none() {
        assert!(ols(&[1.0], &[1.0]).is_none());
        assert!(ols(&[2.0, 2.0], &[1.0, 3.0]).is_none());
        assert!(ols(&[1.0, f64::NAN], &[1.0, 2.0]).is_none());
        assert!(segmented(&[1.0, 2.0], &[1.0, 2.0], None, Hinge::Free).is_none());
        assert!(lstsq(&[vec![1.0, 1.0], vec![2.0, 2.0]], &[1.0, 2.0], &[1.0, 1.0]).is_none());
    }

    #[test]
    fn hand_computed_ols() {
        // x = 0,1,2 ; y = 1,3,2: slope = Σ(x−1)(y−2)/Σ(x−1)² = (−1·−1 + 1·0)/2 = 0.5, a = 1.5.
        let f = ols(&[0.0, 1.0, 2.0], &[1.0, 3.0, 2.0]).unwrap();
        assert!((f.slope - 0.5).abs() < 1e-12);
        assert!((f.intercept - 1.5).abs() < 1e-12);
        // ŷ = 1.5, 2, 2.5 ; SSres = .25+1+.25 = 1.5 ; SStot = 2 ; R² = .25
        assert!((f.r2 - 0.25).abs() < 1e-12);
    }
}
