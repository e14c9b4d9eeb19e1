//! The engines: each folder is one data structure behind the `Engine` trait, with the same
//! shape (mod: the struct, open and the `Engine` impl; then its format, read, write and check
//! files). An engine imports the floors below it (`engine`, `layout`, `kv`, `storage`, `codec`,
//! `error`) and never another engine: what two engines need moves down into `kv` or `layout`.

pub mod betree;
pub mod btree;
pub mod cow;
pub mod lsm;
pub mod sda;

#[cfg(test)]
mod tests {
    use crate::storage::block::kind;

    /// The engines share one data file format: their superblock tags and block kinds must never
    /// collide, and block kinds stay out of the substrate's own.
    #[test]
    fn engine_tags_and_block_kinds_are_distinct() {
        let tags = [
            super::btree::ENGINE_TAG,
            super::betree::ENGINE_TAG,
            super::lsm::ENGINE_TAG,
            super::sda::ENGINE_TAG,
            super::cow::ENGINE_TAG,
        ];
        for (i, a) in tags.iter().enumerate() {
            assert!(tags[i + 1..].iter().all(|b| b != a), "tag {a} used twice");
        }
        let kinds = [
            super::btree::node::KIND_LEAF,
            super::btree::node::KIND_INTERNAL,
            super::betree::node::KIND_LEAF,
            super::betree::node::KIND_LEAF_COMPACT,
            super::betree::node::KIND_LEAF_SHAPED,
            super::betree::node::KIND_INTERNAL,
            super::betree::node::KIND_RUN,
            super::betree::node::KIND_INTERNAL_COMPACT,
            super::betree::node::KIND_RUN_COMPACT,
            super::betree::node::KIND_INTERNAL_SHAPED,
            super::betree::node::KIND_RUN_SHAPED,
            super::lsm::table::KIND_TABLE,
            super::lsm::table::KIND_TABLE2,
            super::lsm::table::KIND_MANIFEST,
            super::sda::array::KIND_ARRAY,
            super::sda::array::KIND_ARRAY2,
            super::sda::array::KIND_MANIFEST,
            super::cow::node::KIND_LEAF,
            super::cow::node::KIND_INTERNAL,
            super::cow::node::KIND_MANIFEST,
        ];
        for (i, a) in kinds.iter().enumerate() {
            assert!(*a >= kind::ENGINE_FIRST);
            assert!(kinds[i + 1..].iter().all(|b| b != a), "kind {a} used twice");
        }
    }
}
