//! A node of the copy-on-write B-tree: a leaf of sorted (key, value) pairs, or an internal node
//! of children and the separators between them (child i holds the keys k with
//! seps[i-1] <= k < seps[i]). One checksummed block each (`storage::block`), read whole.
//!
//! ```text
//! leaf:     entries u32 | per entry: key | value length u32, bytes
//! internal: children u32 | per child: id u64 | children - 1 separators (keys)
//! keys:     length u16, bytes
//! ```
//! A node may be shared by several versions' trees; its reference count (the engine's
//! manifest) says by how many pointers. Decoding checks the order of keys and separators.

use crate::codec::{Reader, Writer};
use crate::error::Result;
use crate::storage::block::kind;
use crate::storage::cache::load_block;
use crate::storage::{NodeId, Pager, Sealed, StoredNode};

/// Block kinds of the CoW B-tree (after the SDA's).
pub const KIND_LEAF: u8 = kind::ENGINE_FIRST + 9;
pub const KIND_INTERNAL: u8 = kind::ENGINE_FIRST + 10;
pub const KIND_MANIFEST: u8 = kind::ENGINE_FIRST + 11;

/// Heap bytes a node costs beyond its entries' bytes.
const OVERHEAD: usize = 64;

#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Leaf(Vec<(Vec<u8>, Vec<u8>)>),
    Internal {
        seps: Vec<Vec<u8>>,
        kids: Vec<NodeId>,
    },
}

impl Node {
    /// The child whose range holds `key`.
    pub fn child_for(seps: &[Vec<u8>], key: &[u8]) -> usize {
        seps.partition_point(|s| s.as_slice() <= key)
    }

    pub fn encode(&self) -> (u8, Vec<u8>) {
        let mut w = Writer::new();
        match self {
            Node::Leaf(es) => {
                w.u32(es.len() as u32);
                for (k, v) in es {
                    w.key(k).u32(v.len() as u32).bytes(v);
                }
                (KIND_LEAF, w.finish())
            }
            Node::Internal { seps, kids } => {
                w.u32(kids.len() as u32);
                for &k in kids {
                    w.u64(k);
                }
                for s in seps {
                    w.key(s);
                }
                (KIND_INTERNAL, w.finish())
            }
        }
    }

    pub fn decode(kind: u8, p: &[u8]) -> std::result::Result<Node, String> {
        let mut r = Reader::new(p);
        let n = r.u32()? as usize;
        let node = match kind {
            KIND_LEAF => {
                let mut es: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(r.capacity(n, 6));
                for _ in 0..n {
                    let k = r.key()?.to_vec();
                    let len = r.u32()? as usize;
                    let v = r.bytes(len)?.to_vec();
                    if es.last().is_some_and(|(l, _)| *l >= k) {
                        return Err("leaf keys out of order".into());
                    }
                    es.push((k, v));
                }
                Node::Leaf(es)
            }
            KIND_INTERNAL => {
                if n == 0 {
                    return Err("an internal node without children".into());
                }
                let mut kids = Vec::with_capacity(r.capacity(n, 8));
                for _ in 0..n {
                    kids.push(r.u64()?);
                }
                let mut seps: Vec<Vec<u8>> = Vec::with_capacity(n - 1);
                for _ in 1..n {
                    let s = r.key()?.to_vec();
                    if seps.last().is_some_and(|l| *l >= s) {
                        return Err("separators out of order".into());
                    }
                    seps.push(s);
                }
                Node::Internal { seps, kids }
            }
            k => return Err(format!("block kind {k}, not a CoW B-tree node")),
        };
        r.finish()?;
        Ok(node)
    }
}

impl StoredNode for Node {
    fn charge(&self) -> usize {
        OVERHEAD
            + match self {
                Node::Leaf(es) => es.iter().map(|(k, v)| k.len() + v.len() + 48).sum(),
                Node::Internal { seps, kids } => {
                    seps.iter().map(|s| s.len() + 24).sum::<usize>() + kids.len() * 8
                }
            }
    }

    fn load(pager: &Pager, id: NodeId) -> Result<Node> {
        load_block(pager, id, Node::decode)
    }

    fn seal(&mut self, id: NodeId) -> Sealed {
        let (kind, payload) = self.encode();
        Sealed::new(id, kind, &payload, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's bytes, fixed: a change to them is a format change.
    #[test]
    fn node_golden_bytes() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let leaf = Node::Leaf(vec![(b"a".to_vec(), b"xy".to_vec())]);
        let (k, p) = leaf.encode();
        assert_eq!(
            (k, hex(&p)),
            (KIND_LEAF, "01000000010061020000007879".into())
        );
        assert_eq!(Node::decode(k, &p).unwrap(), leaf);
        let int = Node::Internal {
            seps: vec![b"m".to_vec()],
            kids: vec![7, 9],
        };
        let (k, p) = int.encode();
        assert_eq!(
            (k, hex(&p)),
            (
                KIND_INTERNAL,
                "02000000070000000000000009000000000000000100 6d".replace(' ', "")
            )
        );
        assert_eq!(Node::decode(k, &p).unwrap(), int);
        assert!(Node::decode(KIND_INTERNAL, &[0, 0, 0, 0]).is_err());
    }
}
