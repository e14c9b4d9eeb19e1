//! The fixed-width list of leaf entries (key and value or blob reference): the B+-tree's leaf
//! payload, and the Bε-tree's basements of the older leaf kind, which are still read.

use crate::codec::Reader;
use crate::kv::{Keys, Val};

/// Leaf entries as B+-tree leaves store them, and Bε-tree basements did before their compact
/// encoding: count u32, then per entry key length u16, tag u8 (0 inline, 1 blob), value length
/// u32, key, then the value or the blob's id u64.
pub fn encode_entries(keys: &Keys, vals: &[Val], out: &mut Vec<u8>) {
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for (k, v) in keys.iter().zip(vals) {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        let (tag, len) = match v {
            Val::Inline(b) => (0u8, b.len() as u32),
            Val::Blob { len, .. } => (1, *len),
        };
        out.push(tag);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(k);
        match v {
            Val::Inline(b) => out.extend_from_slice(b),
            Val::Blob { id, .. } => out.extend_from_slice(&id.to_le_bytes()),
        }
    }
}

/// Entries written by `encode_entries`; keys must be strictly increasing.
pub fn decode_entries(r: &mut Reader<'_>) -> Result<(Keys, Vec<Val>), String> {
    let n = r.u32()? as usize;
    // An entry takes at least 7 bytes (lengths and tag, empty key and value).
    let cap = r.capacity(n, 7);
    let mut keys = Keys::with_capacity(cap);
    let mut vals = Vec::with_capacity(cap);
    for _ in 0..n {
        let klen = r.u16()? as usize;
        let tag = r.u8()?;
        let vlen = r.u32()?;
        let key = r.bytes(klen)?.to_vec();
        let val = match tag {
            0 => Val::Inline(r.bytes(vlen as usize)?.to_vec()),
            1 => Val::Blob {
                id: r.u64()?,
                len: vlen,
            },
            t => return Err(format!("unknown value tag {t}")),
        };
        if keys.last().is_some_and(|p| p >= key.as_slice()) {
            return Err("entries out of order".into());
        }
        keys.push(key);
        vals.push(val);
    }
    Ok((keys, vals))
}
