//! The single-record commands `put`, `get`, `delete` and the range command `scan`, and how keys
//! and values are read from arguments (UTF-8 text, or hex with `--hex`) and printed.

use std::io::{self, BufWriter, Write};
use std::ops::Bound;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use strata::{Db, Options};

use crate::{open_existing, Failure};

pub const ESCAPE_HELP: &str = "Keys and values are UTF-8 text; with --hex, arguments are hex \
digits and output is lowercase hex. Text output escapes backslash, control characters and \
bytes that are not UTF-8 as \\\\, \\t, \\n, \\xNN (like Rust's escape_ascii).";

/// The database and the encoding shared by every key-value command.
#[derive(Args)]
pub struct Target {
    /// Database directory
    #[arg(long, value_name = "DIR")]
    pub db: PathBuf,
    /// Read KEY/VALUE arguments as hex and print keys and values as hex
    #[arg(long)]
    hex: bool,
}

impl Target {
    pub fn bytes(&self, arg: &str) -> Result<Vec<u8>, Failure> {
        if self.hex {
            from_hex(arg).map_err(Failure::Invalid)
        } else {
            Ok(arg.as_bytes().to_vec())
        }
    }

    pub fn show(&self, bytes: &[u8]) -> String {
        if self.hex {
            to_hex(bytes)
        } else {
            escape(bytes)
        }
    }
}

/// Store VALUE under KEY (creates the database if it does not exist)
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct PutArgs {
    #[command(flatten)]
    target: Target,
    key: String,
    value: String,
}

/// Print the value stored under KEY; exit 1 if there is none
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct GetArgs {
    #[command(flatten)]
    target: Target,
    key: String,
}

/// Remove KEY (removing an absent key is not an error)
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct DeleteArgs {
    #[command(flatten)]
    target: Target,
    key: String,
}

/// Print `key<TAB>value` lines for the keys in [--from, --to), in order
#[derive(Args)]
#[command(after_help = ESCAPE_HELP)]
pub struct ScanArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    span: Span,
}

/// A range of keys, as `Db::range` takes it.
pub type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// A scan's key range, order and limit: `scan` and `version scan` alike.
#[derive(Args)]
pub struct Span {
    /// First key (inclusive); default: the smallest key
    #[arg(long, value_name = "KEY")]
    from: Option<String>,
    /// Stop before this key (exclusive); default: past the largest key
    #[arg(long, value_name = "KEY")]
    to: Option<String>,
    /// Iterate from the largest key down
    #[arg(long)]
    reverse: bool,
    /// Print at most N records
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
}

impl Span {
    /// The range's bounds, keys read as `t` says.
    pub fn bounds(&self, t: &Target) -> Result<KeyRange, Failure> {
        let bound = |arg: &Option<String>, inclusive: bool| -> Result<Bound<Vec<u8>>, Failure> {
            Ok(match arg {
                None => Bound::Unbounded,
                Some(k) if inclusive => Bound::Included(t.bytes(k)?),
                Some(k) => Bound::Excluded(t.bytes(k)?),
            })
        };
        Ok((bound(&self.from, true)?, bound(&self.to, false)?))
    }

    /// Print `key<TAB>value` lines from a double-ended iterator over the range, in the span's
    /// order, up to its limit.
    pub fn print<E>(
        &self,
        t: &Target,
        mut iter: impl DoubleEndedIterator<Item = Result<(Vec<u8>, Vec<u8>), E>>,
    ) -> Result<ExitCode, Failure>
    where
        Failure: From<E>,
    {
        let records = std::iter::from_fn(|| {
            if self.reverse {
                iter.next_back()
            } else {
                iter.next()
            }
        });
        let mut out = BufWriter::new(io::stdout().lock());
        for record in records.take(self.limit.unwrap_or(usize::MAX)) {
            let (k, v) = record?;
            writeln!(out, "{}\t{}", t.show(&k), t.show(&v))?;
        }
        out.flush()?;
        Ok(ExitCode::SUCCESS)
    }
}

pub fn put(a: PutArgs) -> Result<ExitCode, Failure> {
    let (key, value) = (a.target.bytes(&a.key)?, a.target.bytes(&a.value)?);
    let db = Db::open(&a.target.db, Options::default())?;
    db.put(key, value)?;
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

pub fn get(a: GetArgs) -> Result<ExitCode, Failure> {
    let key = a.target.bytes(&a.key)?;
    let db = open_existing(&a.target.db)?;
    match db.get(&key)? {
        Some(value) => {
            writeln!(io::stdout().lock(), "{}", a.target.show(&value))?;
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("not found");
            Ok(ExitCode::from(1))
        }
    }
}

pub fn delete(a: DeleteArgs) -> Result<ExitCode, Failure> {
    let key = a.target.bytes(&a.key)?;
    let db = open_existing(&a.target.db)?;
    db.delete(key)?;
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

pub fn scan(a: ScanArgs) -> Result<ExitCode, Failure> {
    let range = a.span.bounds(&a.target)?;
    let db = open_existing(&a.target.db)?;
    let iter = db.range::<Vec<u8>, _>(range)?;
    a.span.print(&a.target, iter)
}

/// Text for people: UTF-8 passes through except backslash and control characters; other bytes
/// become `\xNN`. Tabs and newlines are escaped, so one record is one line of `scan` output.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' || c.is_control() {
                let mut buf = [0u8; 4];
                for &b in c.encode_utf8(&mut buf).as_bytes() {
                    out.extend(std::ascii::escape_default(b).map(char::from));
                }
            } else {
                out.push(c);
            }
        }
        out.extend(chunk.invalid().escape_ascii().map(char::from));
    }
    out
}

pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex digits, either case, with an optional `0x` prefix; an empty string is the empty key.
pub fn from_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("`{text}` is not hex"));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(format!("`{text}` is not hex: odd number of digits"));
    }
    let nibble = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
    Ok(digits
        .as_bytes()
        .chunks(2)
        .map(|pair| nibble(pair[0]) << 4 | nibble(pair[1]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_text_and_marks_the_rest() {
        assert_eq!(escape(b"plain text"), "plain text");
        assert_eq!(escape("caf\u{e9}".as_bytes()), "caf\u{e9}");
        assert_eq!(escape(b"a\tb\nc\\d"), "a\\tb\\nc\\\\d");
        assert_eq!(escape(b"\x00\xff\xfeok"), "\\x00\\xff\\xfeok");
        assert_eq!(escape(b"\"quoted\""), "\"quoted\"");
    }

    #[test]
    fn hex_round_trip() {
        assert_eq!(to_hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(from_hex("00AB10"), Ok(vec![0, 0xab, 0x10]));
        assert_eq!(from_hex("0xff"), Ok(vec![0xff]));
        assert_eq!(from_hex(""), Ok(vec![]));
        assert!(from_hex("abc").is_err());
        assert!(from_hex("zz").is_err());
        assert!(from_hex("+1").is_err());
        assert!(from_hex("é1").is_err());
    }
}
