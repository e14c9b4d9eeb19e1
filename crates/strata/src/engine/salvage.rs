//! The engine side of salvage (see `crate::salvage`): the vocabulary of damage (what could
//! not be read, its key range and its effect) and the state of an engine's tolerant walk, which
//! copies every readable entry, records holes, and later copies the keys of nodes found below
//! them. Only reads; only the sink's errors stop a walk.

use std::collections::HashSet;
use std::fmt;

use crate::error::{Error, Result};
use crate::storage::{NodeId, Pager};

/// A range of keys [lo, hi); `None` is unbounded on that side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyRange {
    pub lo: Option<Vec<u8>>,
    pub hi: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn new(lo: Option<&[u8]>, hi: Option<&[u8]>) -> KeyRange {
        KeyRange {
            lo: lo.map(<[u8]>::to_vec),
            hi: hi.map(<[u8]>::to_vec),
        }
    }

    /// Just `key`.
    pub fn key(key: &[u8]) -> KeyRange {
        let mut next = key.to_vec();
        next.push(0);
        KeyRange {
            lo: Some(key.to_vec()),
            hi: Some(next),
        }
    }

    /// The one key of a range made by `key`.
    pub fn single(&self) -> Option<&[u8]> {
        let (lo, hi) = (self.lo.as_deref()?, self.hi.as_deref()?);
        (hi.len() == lo.len() + 1 && hi.starts_with(lo) && hi.last() == Some(&0)).then_some(lo)
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        in_range(k, self.lo.as_deref(), self.hi.as_deref())
    }
}

impl fmt::Display for KeyRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |k: &Option<Vec<u8>>, none: &str| match k {
            Some(k) => escape(k),
            None => none.to_string(),
        };
        write!(
            f,
            "[{}, {})",
            show(&self.lo, "-inf"),
            show(&self.hi, "+inf")
        )
    }
}

/// Printable ASCII as it is, other bytes as `\xNN`.
pub fn escape(k: &[u8]) -> String {
    k.iter()
        .map(|&b| match b {
            b' '..=b'~' if b != b'\\' => (b as char).to_string(),
            _ => format!("\\x{b:02x}"),
        })
        .collect()
}

pub(crate) fn in_range(k: &[u8], lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    lo.is_none_or(|l| k >= l) && hi.is_none_or(|h| k < h)
}

/// The intersection of [lo, hi) with [ilo, ihi).
pub(crate) fn narrow<'a>(
    lo: Option<&'a [u8]>,
    hi: Option<&'a [u8]>,
    ilo: Option<&'a [u8]>,
    ihi: Option<&'a [u8]>,
) -> (Option<&'a [u8]>, Option<&'a [u8]>) {
    let lo = match (lo, ilo) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let hi = match (hi, ihi) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    (lo, hi)
}

/// Where a salvage walk copies entries to (key, value); its errors stop the walk.
pub type Sink<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// What happened to the keys of a damaged part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Not copied, except the `recovered` ones.
    Lost,
    /// Copied, but writes buffered in the damaged part (Bε-tree segments and runs) are lost:
    /// some values may predate their last write, and some deleted keys may be back.
    Stale,
    /// No keys: the damage was routed around (an older superblock was used, a log stretch
    /// held nothing past the checkpoint).
    None,
}

/// Something salvage could not read.
#[derive(Debug)]
pub struct Damage {
    /// What it was: "superblock", "translation table", "leaf", "internal node", "basement",
    /// "segment", "run", "run chunk", "blob", "value", "log record", ...
    pub what: &'static str,
    /// The node (or blob, or run) it belongs to, when known.
    pub node: Option<NodeId>,
    /// What reading it gave: for damage, `Corruption` with the file and the offset of the
    /// block, partition or record.
    pub error: Error,
    /// The keys it covered, when known.
    pub range: Option<KeyRange>,
    pub effect: Effect,
    /// Keys of the range copied anyway: from nodes found below a damaged node, or settled by
    /// messages buffered above it.
    pub recovered: u64,
}

impl Damage {
    pub(crate) fn new(what: &'static str, node: Option<NodeId>, error: Error) -> Damage {
        Damage {
            what,
            node,
            error,
            range: None,
            effect: Effect::Lost,
            recovered: 0,
        }
    }

    pub(crate) fn keys(mut self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Damage {
        self.range = Some(KeyRange::new(lo, hi));
        self
    }

    pub(crate) fn key(mut self, k: &[u8]) -> Damage {
        self.range = Some(KeyRange::key(k));
        self
    }

    pub(crate) fn effect(mut self, effect: Effect) -> Damage {
        self.effect = effect;
        self
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.what)?;
        if let Some(id) = self.node {
            write!(f, " (node {id})")?;
        }
        if let Some(r) = &self.range {
            match r.single() {
                Some(k) => write!(f, ", key {}", escape(k))?,
                None => write!(f, ", keys {r}")?,
            }
        }
        match self.effect {
            Effect::Lost if self.recovered > 0 => {
                write!(f, ": not read; {} keys recovered", self.recovered)?
            }
            Effect::Lost => write!(f, ": not read")?,
            Effect::Stale if self.recovered > 0 => write!(
                f,
                ": not read; {} keys recovered below it, whose values may predate writes \
                 buffered in it",
                self.recovered
            )?,
            Effect::Stale => write!(f, ": keys copied, values may predate writes buffered there")?,
            Effect::None => {}
        }
        write!(f, " ({})", self.error)
    }
}

/// A key range a walk could not read, waiting for nodes found below it (`H`: what the engine
/// keeps with it, such as the messages bound for it).
pub(crate) struct Hole<H> {
    pub range: KeyRange,
    /// Index into the damage list.
    pub damage: usize,
    pub extra: H,
}

/// The state of an engine's tolerant walk.
pub(crate) struct Walk<'a, H> {
    out: &'a mut Sink<'a>,
    pub lost: &'a mut Vec<Damage>,
    /// Nodes reached, so that a node is never walked twice and those never reached are found.
    pub seen: HashSet<NodeId>,
    pub holes: Vec<Hole<H>>,
    pub copied: u64,
    /// While nodes below holes are walked: the keys they gave.
    pub found: Option<HashSet<Vec<u8>>>,
}

impl<'a, H> Walk<'a, H> {
    pub fn new(out: &'a mut Sink<'a>, lost: &'a mut Vec<Damage>) -> Walk<'a, H> {
        Walk {
            out,
            lost,
            seen: HashSet::new(),
            holes: Vec::new(),
            copied: 0,
            found: None,
        }
    }

    /// Copy one entry out; only the destination's errors stop the walk.
    pub fn emit(&mut self, k: &[u8], v: &[u8]) -> Result<()> {
        (self.out)(k, v)?;
        self.copied += 1;
        if let Some(found) = &mut self.found {
            found.insert(k.to_vec());
        }
        Ok(())
    }

    pub fn lose(&mut self, d: Damage) -> usize {
        self.lost.push(d);
        self.lost.len() - 1
    }

    /// Record damage to the keys of `d.range`, to be looked for below it later.
    pub fn hole(&mut self, d: Damage, extra: H) {
        let range = d.range.clone().unwrap_or_default();
        let damage = self.lose(d);
        self.holes.push(Hole {
            range,
            damage,
            extra,
        });
    }

    /// The ids of `pager`'s table the walk never reached: those below damaged nodes (and
    /// blobs, which are reached through what refers to them).
    pub fn unreached(&self, pager: &Pager) -> Vec<NodeId> {
        pager
            .ids()
            .into_iter()
            .filter(|id| !self.seen.contains(id))
            .collect()
    }

    /// The hole whose range holds `key`.
    pub fn hole_of(&self, key: &[u8]) -> Option<usize> {
        self.holes.iter().position(|h| h.range.contains(key))
    }
}
