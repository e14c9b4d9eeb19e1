//! The one error type of strata. Every fallible call returns `Result<T>`.
//!
//! Variants name what went wrong and where: an IO error carries the operation and file, a
//! corruption carries the file and byte offset of the block whose checksum or structure failed.

use std::fmt;
use std::io;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The operating system (or an injected fault) failed an IO; `context` names the call and file.
    Io {
        context: String,
        source: io::Error,
    },
    /// A block, superblock or log record failed its checksum or does not decode.
    Corruption {
        file: String,
        offset: u64,
        what: String,
    },
    /// The path exists but does not hold a strata database.
    NotADatabase {
        path: String,
        why: String,
    },
    /// The database was written by a newer format version than this build understands.
    UnsupportedVersion {
        file: String,
        found: u32,
        supported: u32,
    },
    KeyTooLarge {
        len: usize,
        max: usize,
    },
    ValueTooLarge {
        len: usize,
        max: usize,
    },
    BatchTooLarge {
        len: usize,
        max: usize,
    },
    InvalidOptions(String),
    /// Another process (or another `Db` in this one) has the database open.
    Locked {
        path: String,
    },
    /// An earlier IO error left in-memory state behind the log; reopen to recover.
    Poisoned {
        cause: String,
    },
    /// A versioned operation named a version it cannot apply to: unknown, deleted, or (for a
    /// write or a version delete) not allowed there. Nothing was changed.
    BadVersion {
        version: u64,
        why: String,
    },
    /// An operation this database does not have (a versioned database's batch with an upsert
    /// or a range delete). Nothing was changed.
    Unsupported(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corruption(file: &str, offset: u64, what: impl Into<String>) -> Error {
        Error::Corruption {
            file: file.to_string(),
            offset,
            what: what.into(),
        }
    }

    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "IO error: {context}: {source}"),
            Error::Corruption { file, offset, what } => {
                write!(f, "corruption in {file} at offset {offset}: {what}")
            }
            Error::NotADatabase { path, why } => {
                write!(f, "{path} is not a strata database: {why}")
            }
            Error::UnsupportedVersion {
                file,
                found,
                supported,
            } => write!(
                f,
                "{file} has format version {found}; this build reads versions up to {supported}"
            ),
            Error::KeyTooLarge { len, max } => {
                write!(f, "key of {len} bytes exceeds the maximum of {max}")
            }
            Error::ValueTooLarge { len, max } => {
                write!(f, "value of {len} bytes exceeds the maximum of {max}")
            }
            Error::BatchTooLarge { len, max } => {
                write!(f, "write batch of {len} bytes exceeds the maximum of {max}")
            }
            Error::InvalidOptions(why) => write!(f, "invalid options: {why}"),
            Error::Locked { path } => write!(f, "{path} is locked by another open database"),
            Error::Poisoned { cause } => {
                write!(
                    f,
                    "database is unusable after an earlier error ({cause}); reopen it"
                )
            }
            Error::BadVersion { version, why } => write!(f, "version {version}: {why}"),
            Error::Unsupported(what) => write!(f, "not supported: {what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
