//! Byte sizes on the command line: `4096`, `64KiB`, `16MiB`, `1GiB`, `2TiB`. Units are powers of
//! 1024 whichever way they are spelled (`K`, `KB`, `KiB` all mean 1024 bytes), case does not
//! matter, and a space may separate the number from the unit. Only whole numbers are accepted.

/// What `--help` says about sizes.
pub const SIZE_HELP: &str = "Sizes are bytes, or a whole number with a unit: K/KB/KiB, M/MB/MiB, \
G/GB/GiB, T/TB/TiB (all powers of 1024, case-insensitive), e.g. 4096, 64KiB, 16MiB.";

/// Parse a size into bytes; the error says what is wrong, for clap to show.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let s = text.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits);
    if number.is_empty() {
        return Err(format!(
            "`{text}` is not a size: expected a whole number of bytes, optionally followed by a \
             unit such as KiB, MiB or GiB"
        ));
    }
    let shift = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => {
            return Err(format!(
                "`{text}` is not a size: unknown unit `{other}` (use B, KiB, MiB, GiB or TiB)"
            ))
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("`{text}` is too large"))
}

/// Render a byte count for people: `512 B`, `64 KiB`, `1.50 MiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    while unit + 1 < UNITS.len() && bytes >= 1u64 << (10 * (unit + 1)) {
        unit += 1;
    }
    if unit == 0 {
        return format!("{bytes} B");
    }
    let scaled = bytes as f64 / (1u64 << (10 * unit)) as f64;
    if bytes.is_multiple_of(1u64 << (10 * unit)) {
        format!("{scaled:.0} {}", UNITS[unit])
    } else {
        format!("{scaled:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_bytes_and_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("64kb"), Ok(64 << 10));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("16 MB"), Ok(16 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2gib"), Ok(2 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size(" 8KiB "), Ok(8 << 10));
    }

    #[test]
    fn rejects_malformed_and_overflowing() {
        for bad in [
            "",
            "KiB",
            "-1",
            "1.5MiB",
            "12XB",
            "0x10",
            "1KiBB",
            "1 2",
            "99999999999999999999",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should not parse");
        }
        assert!(parse_size("20000000TiB").unwrap_err().contains("too large"));
        assert!(parse_size("12XB").unwrap_err().contains("unknown unit"));
    }

    #[test]
    fn human_readable() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(65536), "64 KiB");
        assert_eq!(human(1536 << 10), "1.50 MiB");
        assert_eq!(human(3 << 30), "3 GiB");
    }
}
