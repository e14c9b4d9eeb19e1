//! The Bε-tree's configuration: its geometry (node size B, fanout F, basement size), the
//! limits it must keep, what follows from it (segment cap, inline value limit), and where it
//! came from. Fixed when the tree is created and recorded in its metadata.

use super::*;
use crate::storage::block::PAGE;

/// Where a tree's geometry came from, recorded so that `stats` can say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Given in `Options`.
    Explicit,
    /// The fixed geometry that versions before the built-in figures gave a tree created with
    /// no saved profile (1 MiB nodes, fanout 16, 64 KiB basements); still read from old trees.
    Default,
    /// Chosen by the tuner from the saved device profile.
    Profile,
    /// Chosen by the tuner from the built-in figures of an SSD, since no usable device profile
    /// was saved.
    Builtin,
}

impl Origin {
    pub(super) fn byte(self) -> u8 {
        match self {
            Origin::Explicit => 0,
            Origin::Default => 1,
            Origin::Profile => 2,
            Origin::Builtin => 3,
        }
    }
    pub(super) fn from_byte(b: u8) -> Origin {
        match b {
            1 => Origin::Default,
            2 => Origin::Profile,
            3 => Origin::Builtin,
            _ => Origin::Explicit,
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            Origin::Explicit => "given in the options",
            Origin::Default => "the old built-in default (no usable saved device profile)",
            Origin::Profile => "tuned from the saved device profile",
            Origin::Builtin => {
                "tuned from built-in SSD figures (no usable saved device profile: `strata \
                 profile` measures this disk)"
            }
        }
    }
}

/// Node geometry, fixed when the tree is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub node_size: usize,
    pub fanout: usize,
    pub basement: usize,
}

/// A large-basement geometry (1 MiB nodes, fanout 16, 64 KiB basements): what a tree created
/// with no saved profile got before the tuner's built-in figures; tests keep it for its large
/// basements. Out of memory a point read decodes a whole 64 KiB basement: at 1M records and a
/// 32 MiB cache it read 12K keys/s where the tuned 4 KiB basements read over 100K.
pub const LARGE_BASEMENTS: Geometry = Geometry {
    node_size: 1 << 20,
    fanout: 16,
    basement: 64 << 10,
};

impl Geometry {
    pub fn check(&self) -> Result<()> {
        let Geometry {
            node_size,
            fanout,
            basement,
        } = *self;
        let bad = |why: String| Err(Error::InvalidOptions(why));
        if !node_size.is_power_of_two() || !(4 << 10..=64 << 20).contains(&node_size) {
            return bad(format!(
                "Bε-tree node size must be a power of two from 4 KiB to 64 MiB, not {node_size}"
            ));
        }
        if !(3..=256).contains(&fanout) {
            return bad(format!(
                "Bε-tree fanout must be from 3 to 256, not {fanout}"
            ));
        }
        if !basement.is_power_of_two() || basement < 1024 || basement > node_size {
            return bad(format!(
                "Bε-tree basement size must be a power of two from 1 KiB to the node size, not {basement}"
            ));
        }
        Ok(())
    }

    /// A segment larger than this is flushed: a query then reads at most about B/F bytes of
    /// buffer per level (Theorem 9). But never less than a page: a flush costs at least a page
    /// read and written of the child, and a query reads at least a page, so a cap below a page
    /// only makes flushes small and buys queries nothing. On small nodes (seed 001's 4 KiB of
    /// fanout 23, where B/F held 12 messages of 8-byte pairs) the cap is then the node itself:
    /// a node flushes when full, its heaviest segment, as seed 001's tree flushes a full
    /// buffer. Nodes of 64 KiB and more with F <= 16 keep B/F.
    pub(super) fn segment_cap(&self) -> usize {
        (self.node_size / self.fanout)
            .max(PAGE as usize)
            .min(self.node_size)
    }

    /// Values longer than this go out of line, so that one value never dominates a segment or
    /// a basement.
    pub(super) fn inline_max(&self) -> usize {
        (self.basement / 4)
            .min(self.node_size / (4 * self.fanout))
            .max(64)
    }
}
