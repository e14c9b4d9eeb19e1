//! Encoding and decoding helpers shared by the on-disk formats: `Reader` and its matching
//! `Writer` (little-endian, fields in order), and LEB128 varints (`put_varint`, `varint_len`,
//! `Reader::varint`), which the LSM-tree's format-2 blocks and the compact message encoding
//! of `kv::msg` share.
//!
//! Every count and length in a decoder's input is untrusted: a decoder reads through `Reader`,
//! which fails instead of reading past the end, and sizes what it reserves with `capacity`, so
//! that no field can make it allocate more than its input accounts for.

/// A bounds-checked little-endian reader; errors say where the bytes ran out.
pub(crate) struct Reader<'a> {
    p: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(p: &'a [u8]) -> Reader<'a> {
        Reader { p, at: 0 }
    }
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.p.len());
        let end =
            end.ok_or_else(|| format!("truncated at byte {} of {}", self.at, self.p.len()))?;
        let s = &self.p[self.at..end];
        self.at = end;
        Ok(s)
    }
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().unwrap()))
    }
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap()))
    }
    /// A LEB128 varint (`put_varint`): refused if longer than 10 bytes, past 64 bits, or not
    /// in its shortest form, so that every value has one encoding and decoding then
    /// re-encoding gives the same bytes.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, String> {
        // Up to three bytes (lengths, versions, sequence numbers below 2^21: most varints)
        // without the loop; a last byte of 0 after others is not the shortest form, and goes
        // the long way to its error.
        let (v, n) = match self.p.get(self.at..) {
            Some([a, ..]) if *a < 0x80 => (*a as u64, 1),
            Some([a, b, ..]) if *b < 0x80 && *b != 0 => ((*a & 0x7f) as u64 | (*b as u64) << 7, 2),
            Some([a, b, c, ..]) if *b >= 0x80 && *c < 0x80 && *c != 0 => (
                (*a & 0x7f) as u64 | ((*b & 0x7f) as u64) << 7 | (*c as u64) << 14,
                3,
            ),
            _ => return self.varint_long(),
        };
        self.at += n;
        Ok(v)
    }
    /// `varint` past three bytes, or refused.
    fn varint_long(&mut self) -> Result<u64, String> {
        let (v, n) =
            read_varint(&self.p[self.at..]).map_err(|e| format!("{e} at byte {}", self.at))?;
        self.at += n;
        Ok(v)
    }
    /// A key or other short byte string written by `Writer::key`.
    pub fn key(&mut self) -> Result<&'a [u8], String> {
        let n = self.u16()? as usize;
        self.bytes(n)
    }
    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.p.len() - self.at
    }
    /// How many of `count` items, each at least `min_len` bytes encoded, the bytes not yet read
    /// can hold: the capacity to reserve for them, so that a corrupt count cannot make a
    /// decoder reserve more memory than its input accounts for.
    pub fn capacity(&self, count: usize, min_len: usize) -> usize {
        count.min(self.remaining() / min_len.max(1))
    }
    pub fn finish(&self) -> Result<(), String> {
        if self.at == self.p.len() {
            Ok(())
        } else {
            Err(format!("{} trailing bytes", self.p.len() - self.at))
        }
    }
}

/// Append `v` as a LEB128 varint: 7 bits a byte, low first, the high bit set on every byte
/// but the last.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `put_varint` writes for `v` (1 to 10).
pub(crate) const fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// The varint at the start of `p` and its length in bytes; refused if it runs past `p`, is
/// longer than 10 bytes or past 64 bits, or is not in its shortest form (a last byte of 0
/// after others).
pub(crate) fn read_varint(p: &[u8]) -> Result<(u64, usize), String> {
    let mut v = 0u64;
    for (i, &b) in p.iter().enumerate().take(10) {
        let bits = (b & 0x7f) as u64;
        if i == 9 && b > 1 {
            return Err("a varint past 64 bits".into());
        }
        v |= bits << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err("a varint not in its shortest form".into());
            }
            return Ok((v, i + 1));
        }
    }
    if p.len() >= 10 {
        Err("a varint longer than 10 bytes".into())
    } else {
        Err("truncated inside a varint".into())
    }
}

/// The matching little-endian writer: fields appended in order.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Writer {
        self.buf.extend_from_slice(b);
        self
    }
    pub fn u8(&mut self, v: u8) -> &mut Writer {
        self.buf.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u32(&mut self, v: u32) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }
    /// A key or other short byte string: its length (u16), then its bytes.
    pub fn key(&mut self, k: &[u8]) -> &mut Writer {
        self.u16(k.len() as u16).bytes(k)
    }
    pub fn u64(&mut self, v: u64) -> &mut Writer {
        self.bytes(&v.to_le_bytes())
    }
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_only_their_shortest_form_reads() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            1 << 21,
            1 << 28,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
            let mut r = Reader::new(&b);
            assert_eq!(r.varint().unwrap(), v);
            r.finish().unwrap();
            assert!(read_varint(&b[..b.len() - 1]).is_err(), "truncated {v}");
        }
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(u64::MAX), 10);
        // 300 is ac 02; ac 82 00 is 300 too, but longer than it need be.
        let mut b = Vec::new();
        put_varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        assert!(read_varint(&[0xac, 0x82, 0x00])
            .unwrap_err()
            .contains("shortest"));
        assert!(read_varint(&[0x80, 0x00]).is_err());
        assert!(read_varint(&[0xff; 11]).unwrap_err().contains("64 bits"));
        let mut past = [0xffu8; 10];
        past[9] = 0x02;
        assert!(read_varint(&past).unwrap_err().contains("64 bits"));
        assert!(Reader::new(&[0x80])
            .varint()
            .unwrap_err()
            .contains("at byte 0"));
    }

    /// `Reader::varint`'s short paths (up to three bytes) agree with `read_varint` on every
    /// two-byte input and on three-byte ones of every first two bytes: the same value and
    /// length, or an error for the same inputs (not the shortest form, truncated).
    #[test]
    fn the_readers_short_varints_agree_with_the_long_way() {
        let mut inputs: Vec<Vec<u8>> = vec![vec![], vec![0x80], vec![0x80, 0x80]];
        for a in 0..=255u8 {
            inputs.push(vec![a]);
            for b in 0..=255u8 {
                inputs.push(vec![a, b]);
                for c in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                    inputs.push(vec![a, b, c]);
                    inputs.push(vec![a, b, c, 0x01]);
                }
            }
        }
        for p in inputs {
            let mut r = Reader::new(&p);
            match (r.varint(), read_varint(&p)) {
                (Ok(v), Ok((w, n))) => {
                    assert_eq!((v, r.position()), (w, n), "{p:x?}");
                }
                (Err(_), Err(_)) => {}
                (got, want) => panic!("{p:x?}: {got:?} against {want:?}"),
            }
        }
        assert!(Reader::new(&[0xac, 0x82, 0x00])
            .varint()
            .unwrap_err()
            .contains("shortest"));
    }

    #[test]
    fn what_the_writer_writes_the_reader_reads() {
        let mut w = Writer::new();
        w.u8(7).u32(0x0304_0506).u64(u64::MAX - 1).bytes(b"end");
        let b = w.finish();
        assert_eq!(b.len(), 1 + 4 + 8 + 3);
        assert_eq!(&b[..3], &[7, 6, 5]);
        let mut r = Reader::new(&b);
        assert_eq!(r.u8().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), 0x0304_0506);
        assert_eq!(r.u64().unwrap(), u64::MAX - 1);
        assert_eq!(r.bytes(3).unwrap(), b"end");
        r.finish().unwrap();
        assert!(r.u8().unwrap_err().contains("truncated at byte 16 of 16"));
    }
}
