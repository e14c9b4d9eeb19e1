//! The engines: each folder is one data structure behind the `Engine` trait, with the same
//! shape (mod: the struct, open and the `Engine` impl; then its format, read, write and check
//! files). An engine imports the floors below it (`engine`, `layout`, `kv`, `storage`, `codec`,
//! `error`) and never another engine: what two engines need moves down into `kv` or `layout`.

pub mod betree;
pub mod btree;
