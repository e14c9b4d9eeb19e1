//! Encoding and decoding helpers shared by the on-disk formats: `Reader` and its matching
//! `Writer` (little-endian, fields in order).
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
    /// Bytes read so far.
    /// A key or other short byte string written by `Writer::key`.
    pub fn key(&mut self) -> Result<&'a [u8], String> {
        let n = self.u16()? as usize;
        self.bytes(n)
    }
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
