//! The B+-tree's configuration: the node sizes it accepts. The node size is fixed when the
//! tree is created and recorded in its metadata; values longer than a quarter of it go to blobs.

use super::*;

pub const MIN_NODE_SIZE: usize = 4 << 10;

pub const MAX_NODE_SIZE: usize = 4 << 20;

impl BTree {
    pub fn check_node_size(node_size: usize) -> Result<()> {
        if !node_size.is_power_of_two() || !(MIN_NODE_SIZE..=MAX_NODE_SIZE).contains(&node_size) {
            return Err(Error::InvalidOptions(format!(
                "B+-tree node size must be a power of two from 4 KiB to 4 MiB, not {node_size}"
            )));
        }
        Ok(())
    }
}
