//! raft-kv: a three-node replicated key-value service on loopback, each node a strata database
//! under openraft (strata-raft), talking TCP; and its client.
//!
//! ```sh
//! cargo run -p strata-raft --example raft-kv -- cluster --dir /tmp/raft-kv     # three nodes
//! cargo run -p strata-raft --example raft-kv -- client put hello world get hello
//! ```
//!
//! `cluster` starts three `node` processes (ports 21001..21003 by default) and waits for them;
//! Ctrl-C stops all three. Run it again on the same directory and the nodes recover their
//! databases and rejoin. `node` runs one node; `client` sends commands to whichever node leads.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use clap::{Parser, Subcommand};
use strata_raft::cluster::{default_config, Client, Node};
use strata_raft::Request;

#[derive(Parser)]
#[command(about = "three-node replicated key-value service on strata + openraft")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start three nodes, one process each, on 127.0.0.1:PORT..PORT+2.
    Cluster {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 21001)]
        port: u16,
    },
    /// Run one node.
    Node {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        addr: SocketAddr,
        /// Initialize the cluster with these members (id=addr,...) unless it already is.
        #[arg(long, value_delimiter = ',')]
        init: Vec<String>,
    },
    /// Send commands: put K V, get K, delete K, fill N (N writes of 100-byte values).
    Client {
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "127.0.0.1:21001,127.0.0.1:21002,127.0.0.1:21003"
        )]
        nodes: Vec<String>,
        words: Vec<String>,
    },
}

fn members(port: u16) -> BTreeMap<u64, String> {
    (1..=3u64)
        .map(|id| (id, format!("127.0.0.1:{}", port + id as u16 - 1)))
        .collect()
}

fn cluster(dir: PathBuf, port: u16) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let all = members(port);
    let init: Vec<String> = all.iter().map(|(id, a)| format!("{id}={a}")).collect();
    let mut children = Vec::new();
    for (id, addr) in &all {
        let mut c = Command::new(&exe);
        c.args(["node", "--id", &id.to_string(), "--addr", addr, "--dir"])
            .arg(dir.join(format!("node-{id}")));
        if *id == 1 {
            c.arg("--init").arg(init.join(","));
        }
        children.push(c.spawn().map_err(|e| format!("start node {id}: {e}"))?);
    }
    println!(
        "three nodes on {}; try: cargo run -p strata-raft --example raft-kv -- client put hello world get hello",
        all.values().cloned().collect::<Vec<_>>().join(", ")
    );
    for mut c in children {
        let _ = c.wait();
    }
    Ok(())
}

async fn node(id: u64, dir: PathBuf, addr: SocketAddr, init: Vec<String>) -> Result<(), String> {
    let n = Node::start(id, &dir, addr, default_config(), strata::Options::default())
        .await
        .map_err(|e| e.to_string())?;
    eprintln!("node {id}: serving on {} from {}", n.addr, dir.display());
    if !init.is_empty() && !n.raft.is_initialized().await.map_err(|e| e.to_string())? {
        let mut m = BTreeMap::new();
        for s in &init {
            let (i, a) = s
                .split_once('=')
                .ok_or(format!("--init wants id=addr, got {s}"))?;
            m.insert(i.parse::<u64>().map_err(|e| e.to_string())?, a.to_string());
        }
        n.initialize(&m).await.map_err(|e| e.to_string())?;
    }
    let mut metrics = n.raft.metrics();
    let mut leader = None;
    loop {
        let now = metrics.borrow().current_leader;
        if now != leader {
            eprintln!("node {id}: leader is {now:?}");
            leader = now;
        }
        if metrics.changed().await.is_err() {
            return Ok(());
        }
    }
}

async fn client(nodes: Vec<String>, words: Vec<String>) -> Result<(), String> {
    let mut c = Client::new(nodes);
    let mut w = words.iter().map(String::as_str);
    while let Some(cmd) = w.next() {
        let mut arg = || w.next().ok_or(format!("{cmd} wants more arguments"));
        match cmd {
            "put" => {
                let (k, v) = (arg()?, arg()?);
                let r = c
                    .set(k.as_bytes(), v.as_bytes())
                    .await
                    .map_err(|e| e.to_string())?;
                println!("put {k}: ok (log index {})", r.index);
            }
            "get" => {
                let k = arg()?;
                match c.get(k.as_bytes()).await.map_err(|e| e.to_string())? {
                    Some(v) => println!("{k} = {}", String::from_utf8_lossy(&v)),
                    None => println!("{k} not found"),
                }
            }
            "delete" => {
                let k = arg()?.as_bytes().to_vec();
                let r = c
                    .write(Request::Delete { key: k })
                    .await
                    .map_err(|e| e.to_string())?;
                println!("delete: ok (log index {})", r.index);
            }
            "fill" => {
                let n: u64 = arg()?.parse().map_err(|e| format!("fill N: {e}"))?;
                let t = std::time::Instant::now();
                for i in 0..n {
                    let v = vec![b'x'; 100];
                    c.set(format!("fill-{i:08}").as_bytes(), &v)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                let s = t.elapsed().as_secs_f64();
                println!(
                    "fill: {n} acknowledged writes in {s:.2} s ({:.0}/s, one at a time)",
                    n as f64 / s
                );
            }
            other => return Err(format!("unknown command {other}: put, get, delete or fill")),
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    let done = match Cli::parse().cmd {
        Cmd::Cluster { dir, port } => cluster(dir, port),
        Cmd::Node {
            id,
            dir,
            addr,
            init,
        } => node(id, dir, addr, init).await,
        Cmd::Client { nodes, words } => client(nodes, words).await,
    };
    if let Err(e) = done {
        eprintln!("raft-kv: {e}");
        std::process::exit(1);
    }
}
