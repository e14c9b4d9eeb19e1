//! Optimal node sizes in the affine model (seed 000 sections 5 and 6), in the paper's normalised
//! units: sizes in items, α = the normalised cost of transferring one item, costs per unit of
//! log(N/M). The tuner converts to bytes and seconds (`tune`), and `predict` gives the full
//! per-operation costs with caching; these closed forms are what it is checked against.
//!
//! Invariants: α > 0; every function is pure; the closed-form optimum and the brute-force
//! minimiser agree (tested), because the first is the unique root of f′ and f is unimodal.

/// Lemma 5's B-tree point-operation cost per level-unit, f(x) = (1 + αx) / ln(x + 1), for nodes of
/// x items: each level costs one IO of x items and there are ln(N/M)/ln(x+1) levels.
pub fn btree_cost(alpha: f64, x: f64) -> f64 {
    (1.0 + alpha * x) / (x + 1.0).ln()
}

/// Corollary 7: the node size in items minimising `btree_cost`. f′(x) = 0 reduces to
/// g(x) = α(1 + x)ln(1 + x) − (1 + αx) = 0, and g′(x) = α·ln(1 + x) > 0, so g has exactly one
/// root; bisection finds it to machine precision.
pub fn btree_optimal_items(alpha: f64) -> f64 {
    let g = |x: f64| alpha * (1.0 + x) * (1.0 + x).ln() - (1.0 + alpha * x);
    let (mut lo, mut hi) = (0.0, 1.0);
    while g(hi) < 0.0 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if g(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Corollary 7's asymptotic form, 1 / (α ln(1/α)): the optimum up to a constant factor.
pub fn btree_optimal_items_approx(alpha: f64) -> f64 {
    1.0 / (alpha * (1.0 / alpha).ln())
}

/// The integer in `lo..=hi` minimising `f` by evaluating every one: the check on closed forms.
pub fn brute_force_argmin(lo: u64, hi: u64, f: impl Fn(u64) -> f64) -> u64 {
    (lo..=hi)
        .min_by(|&a, &b| f(a).total_cmp(&f(b)))
        .unwrap_or(lo)
}

/// Theorem 9: affine cost of reading one level of the optimised Bε-tree on a query, one pivot set
/// and one buffer segment: 1 + αB/F + αF.
pub fn betree_query_per_level(alpha: f64, node_items: f64, fanout: f64) -> f64 {
    1.0 + alpha * node_items / fanout + alpha * fanout
}

/// Lemma 8: amortised affine cost of moving one element down one level: F/B + αF.
pub fn betree_insert_per_level(alpha: f64, node_items: f64, fanout: f64) -> f64 {
    fanout / node_items + alpha * fanout
}

/// Table 3, B-tree row (insert and query alike): (1 + αB) / ln B per unit of ln(N/M).
pub fn table3_btree(alpha: f64, node_items: f64) -> f64 {
    (1.0 + alpha * node_items) / node_items.ln()
}

/// Table 3, Bε-tree insert: F(1 + αB) / (B ln F) per unit of ln(N/M).
pub fn table3_betree_insert(alpha: f64, node_items: f64, fanout: f64) -> f64 {
    fanout * (1.0 + alpha * node_items) / (node_items * fanout.ln())
}

/// Table 3, Bε-tree query with per-child segments: (F + αF² + αB) / (F ln F) per unit of ln(N/M).
pub fn table3_betree_query(alpha: f64, node_items: f64, fanout: f64) -> f64 {
    (fanout + alpha * fanout * fanout + alpha * node_items) / (fanout * fanout.ln())
}

/// Corollary 12: fanout F = 1/(α ln(1/α)) and node size B = F² (items), whose query cost matches
/// the best B-tree's up to low-order terms while inserts are Θ(log 1/α) times cheaper.
pub fn corollary12(alpha: f64) -> (f64, f64) {
    let f = btree_optimal_items_approx(alpha);
    (f, f * f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimum_is_a_stationary_point() {
        for alpha in [1e-2, 1e-3, 1e-4, 1e-5] {
            let x = btree_optimal_items(alpha);
            let h = x * 1e-6;
            let d = (btree_cost(alpha, x + h) - btree_cost(alpha, x - h)) / (2.0 * h);
            assert!(d.abs() < 1e-9, "alpha {alpha}: f'({x}) = {d}");
        }
    }

    #[test]
    fn table3_betree_query_equals_theorem9_over_ln_f() {
        let (a, b, f) = (1e-3, 4096.0, 64.0);
        let t9 = betree_query_per_level(a, b, f) / f.ln();
        assert!((t9 - table3_betree_query(a, b, f)).abs() < 1e-12);
    }
}
