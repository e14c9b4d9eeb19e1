//! Failover of the three-node key-value service on loopback (all three nodes in this process,
//! each with its own strata database and TCP listener):
//! write; stop the leader as a crash would (no checkpoint); keep writing through the new
//! leader, long enough that it snapshots and purges the log the old leader missed; restart the
//! old leader on its directory; write again; then every acknowledged write must be on every
//! node, and nothing else.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use openraft::SnapshotPolicy;
use strata_raft::cluster::{default_config, Client, Node};
use strata_raft::NodeId;

fn opts() -> strata::Options {
    strata::Options::default().cache_bytes(8 << 20)
}

fn config() -> openraft::Config {
    openraft::Config {
        // Snapshot and purge often, so that the restarted node must be sent a snapshot.
        snapshot_policy: SnapshotPolicy::LogsSinceLast(64),
        max_in_snapshot_log_to_keep: 0,
        ..default_config()
    }
}

async fn leader_of(nodes: &BTreeMap<NodeId, Node>) -> NodeId {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for n in nodes.values() {
            if n.raft.current_leader().await == Some(n.id) {
                return n.id;
            }
        }
        assert!(Instant::now() < deadline, "no leader elected in 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Write keys `from..to`, recording each acknowledged write (key, value, log index).
async fn write_keys(
    client: &mut Client,
    round: &str,
    range: std::ops::Range<u32>,
    acked: &mut BTreeMap<Vec<u8>, (Vec<u8>, u64)>,
) {
    for i in range {
        let key = format!("key-{i:05}").into_bytes();
        let value = format!("{round}-{i}").into_bytes();
        // A write that fails may or may not have been committed; retry it until it is
        // acknowledged (setting the same value again changes nothing).
        let mut tries = 0;
        loop {
            match client.set(&key, &value).await {
                Ok(r) => {
                    acked.insert(key, (value, r.index));
                    break;
                }
                Err(e) => {
                    tries += 1;
                    assert!(tries < 20, "write of key {i} kept failing: {e}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_every_acknowledged_write() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = BTreeMap::new();
    for id in 1..=3u64 {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let dir = root.path().join(format!("node-{id}"));
        let node = Node::start(id, &dir, addr, config(), opts()).await.unwrap();
        nodes.insert(id, node);
    }
    let members: BTreeMap<NodeId, String> =
        nodes.values().map(|n| (n.id, n.addr.to_string())).collect();
    nodes[&1].initialize(&members).await.unwrap();
    let mut client = Client::new(members.values().cloned().collect());
    let mut acked = BTreeMap::new();
    let t0 = Instant::now();

    write_keys(&mut client, "a", 0..100, &mut acked).await;
    let old = leader_of(&nodes).await;
    let old_node = nodes.remove(&old).unwrap();
    let (old_addr, old_dir) = (old_node.addr, old_node.dir.clone());
    let old_last = old_node.raft.metrics().borrow().last_log_index.unwrap();
    old_node.crash().await;
    println!("stopped leader {old} after {} writes", acked.len());

    // Overwrite half of the first keys and add new ones through whichever node leads now.
    write_keys(&mut client, "b", 50..300, &mut acked).await;
    let new = leader_of(&nodes).await;
    assert_ne!(new, old, "the stopped node cannot lead");
    // Snapshots and purges run in the background: give the new leader's a moment to land.
    let deadline = Instant::now() + Duration::from_secs(20);
    let purged = loop {
        let purged = nodes[&new].raft.metrics().borrow().purged;
        if purged.is_some_and(|p| p.index > old_last) || Instant::now() > deadline {
            break purged;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "new leader {new}; its log is purged through {purged:?}; the old one's ended at {old_last}"
    );
    assert!(
        purged.is_some_and(|p| p.index > old_last),
        "the new leader has purged entries the old leader missed: only a snapshot can catch it up"
    );

    let restarted = Node::start(old, &old_dir, old_addr, config(), opts())
        .await
        .unwrap();
    nodes.insert(old, restarted);
    write_keys(&mut client, "c", 250..350, &mut acked).await;

    // Every node must apply through the last acknowledged index.
    let last = acked.values().map(|v| v.1).max().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in nodes.values() {
        while n.sm.last_applied().map(|l| l.index) < Some(last) {
            assert!(
                Instant::now() < deadline,
                "node {} applied only {:?} of {last}",
                n.id,
                n.sm.last_applied()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let expected: Vec<(Vec<u8>, Vec<u8>)> = acked
        .iter()
        .map(|(k, (v, _))| (k.clone(), v.clone()))
        .collect();
    for n in nodes.values() {
        assert_eq!(
            n.sm.pairs().unwrap(),
            expected,
            "node {} does not hold exactly the acknowledged writes",
            n.id
        );
    }
    let snap = nodes[&old].raft.metrics().borrow().snapshot;
    println!("restarted node {old} holds a snapshot through {snap:?}");
    assert!(snap.is_some(), "the restarted node was sent a snapshot");
    // Linearizable reads through the client agree.
    for k in ["key-00000", "key-00100", "key-00349"] {
        let got = client.get(k.as_bytes()).await.unwrap();
        assert_eq!(got.as_ref(), acked.get(k.as_bytes()).map(|v| &v.0));
    }
    println!(
        "{} acknowledged writes on all 3 nodes; {:.1} s",
        acked.len(),
        t0.elapsed().as_secs_f64()
    );
    for n in std::mem::take(&mut nodes).into_values() {
        n.crash().await;
    }
}
