//! The `rum` workload's keys, shared by the integration tests and the hot-path benchmarks.

/// 16 bytes: a 64-bit mix of the record number `i`, then `i` itself, so keys come in random
/// order and never repeat.
pub fn rum_key(i: u64) -> [u8; 16] {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&(z ^ (z >> 31)).to_be_bytes());
    k[8..].copy_from_slice(&i.to_be_bytes());
    k
}
