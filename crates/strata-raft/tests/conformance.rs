//! openraft's storage conformance suite (`openraft::testing::Suite`) against strata-raft.
//!
//! Every case of the suite is a test of its own on strata's default engine, the Bε-tree, so a
//! failure names its case and the run shows the count. `whole_suite_*` also runs the suite's own
//! list (`Suite::test_all`), on the Bε-tree, the B+-tree and the LSM-tree, so a case that a newer openraft
//! adds is run even before it is named here. Each case gets a fresh database in a temporary
//! directory, removed when the case ends.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use strata_raft::{LogStore, StateMachine, TypeConfig};
use tempfile::TempDir;

#[derive(Clone, Copy)]
enum Engine {
    BeTree,
    BTree,
    Lsm,
}

struct Builder {
    engine: Engine,
}

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, StateMachine, TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore<TypeConfig>, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let opts = match self.engine {
            Engine::BeTree => strata::Options::default(),
            Engine::BTree => strata::Options::default().btree(16 << 10),
            Engine::Lsm => strata::Options::default().lsm(strata::LsmConfig::for_cache(4 << 20)),
        };
        let (log, sm) = strata_raft::open(dir.path(), opts.cache_bytes(4 << 20))
            .expect("open a strata database");
        Ok((dir, log, sm))
    }
}

type S = Suite<TypeConfig, LogStore<TypeConfig>, StateMachine, Builder, TempDir>;

const BETREE: Builder = Builder {
    engine: Engine::BeTree,
};

macro_rules! cases {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let run = async {
                let (_dir, log, sm) = BETREE.build().await?;
                S::$name(log, sm).await
            };
            tokio::runtime::Runtime::new().unwrap().block_on(run).unwrap();
        }
    )*};
}

cases!(
    last_membership_in_log_initial,
    last_membership_in_log,
    last_membership_in_log_multi_step,
    get_membership_initial,
    get_membership_from_log_and_empty_sm,
    get_membership_from_empty_log_and_sm,
    get_membership_from_log_le_sm_last_applied,
    get_membership_from_log_gt_sm_last_applied_1,
    get_membership_from_log_gt_sm_last_applied_2,
    get_initial_state_without_init,
    get_initial_state_membership_from_log_and_sm,
    get_initial_state_with_state,
    get_initial_state_last_log_gt_sm,
    get_initial_state_last_log_lt_sm,
    get_initial_state_log_ids,
    get_initial_state_re_apply_committed,
    save_vote,
    get_log_entries,
    limited_get_log_entries,
    try_get_log_entry,
    initial_logs,
    get_log_state,
    get_log_id,
    last_id_in_log,
    last_applied_state,
    purge_logs_upto_0,
    purge_logs_upto_5,
    purge_logs_upto_20,
    delete_logs_since_11,
    delete_logs_since_0,
    append_to_log,
    snapshot_meta,
    apply_single,
    apply_multiple,
);

#[test]
fn transfer_snapshot() {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(S::transfer_snapshot(&BETREE))
        .unwrap();
}

#[test]
fn whole_suite_betree() {
    S::test_all(BETREE).unwrap();
}

#[test]
fn whole_suite_btree() {
    S::test_all(Builder {
        engine: Engine::BTree,
    })
    .unwrap();
}

#[test]
fn whole_suite_lsm() {
    S::test_all(Builder {
        engine: Engine::Lsm,
    })
    .unwrap();
}
