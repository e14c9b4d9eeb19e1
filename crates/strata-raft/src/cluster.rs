//! A node of the replicated key-value service: strata-raft's storage, openraft's `Raft`, and
//! openraft's network trait over plain TCP; plus a small client. The `raft-kv` example and the
//! failover test run nodes built here.
//!
//! Wire format: each message is a frame, its length (u32 little-endian) then its postcard
//! encoding; a connection carries one request at a time, each answered before the next.
//!
//! Invariants:
//! - A client write is acknowledged only once openraft reports it committed and applied on the
//!   leader, so an acknowledged write is on a majority of the nodes' durable logs.
//! - A client read goes to the leader and waits for `ensure_linearizable`, so it sees every
//!   write acknowledged before it was sent.
//! - Stopping a node ([`Node::crash`]) closes its listener and every connection and shuts its
//!   Raft down without checkpointing strata: a restart recovers the way it would after a crash.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, RaftNetwork, RaftNetworkFactory};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::{command_fits, NodeId, Raft, Request, Response, StateMachine, TypeConfig};

/// Frames larger than this are refused: a snapshot travels in chunks far below it.
const MAX_FRAME: usize = 64 << 20;

#[derive(Serialize, Deserialize)]
enum Message {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    Write(Request),
    Read(Vec<u8>),
}

#[derive(Serialize, Deserialize)]
enum Reply {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Write(Result<Response, ServiceError>),
    Read(Result<Option<Vec<u8>>, ServiceError>),
}

/// Why the service did not carry out a client's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServiceError {
    /// This node is not the leader; the leader's address, when known.
    NotLeader(Option<String>),
    /// The command is over strata's key or value limits.
    TooLarge,
    Other(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::NotLeader(Some(a)) => write!(f, "not the leader; the leader is {a}"),
            ServiceError::NotLeader(None) => write!(f, "not the leader; no leader known"),
            ServiceError::TooLarge => write!(f, "key or value over strata's limits"),
            ServiceError::Other(e) => write!(f, "{e}"),
        }
    }
}

async fn send_frame<T: Serialize>(s: &mut TcpStream, msg: &T) -> io::Result<()> {
    let body = postcard::to_stdvec(msg).map_err(io::Error::other)?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    s.write_all(&frame).await
}

async fn recv_frame<T: DeserializeOwned>(s: &mut TcpStream) -> io::Result<T> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("frame of {len} bytes refused")));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    postcard::from_bytes(&body).map_err(io::Error::other)
}

/// One request-reply exchange on `conn`, opening it first if needed; a failure closes it.
async fn exchange(
    conn: &mut Option<TcpStream>,
    addr: &str,
    msg: &Message,
    ttl: Duration,
) -> io::Result<Reply> {
    let run = async {
        if conn.is_none() {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            *conn = Some(s);
        }
        let s = conn.as_mut().expect("connected above");
        send_frame(s, msg).await?;
        recv_frame::<Reply>(s).await
    };
    let r = match tokio::time::timeout(ttl, run).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "RPC timed out")),
    };
    if r.is_err() {
        *conn = None;
    }
    r
}

/// openraft's network factory: a TCP connection per peer.
pub struct Network;

pub struct Peer {
    target: NodeId,
    addr: String,
    conn: Option<TcpStream>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer {
            target,
            addr: node.addr.clone(),
            conn: None,
        }
    }
}

impl Peer {
    async fn call<E: std::error::Error>(
        &mut self,
        msg: Message,
        option: &RPCOption,
    ) -> Result<Reply, RPCError<NodeId, BasicNode, E>> {
        exchange(&mut self.conn, &self.addr, &msg, option.hard_ttl())
            .await
            .map_err(|e| match e.kind() {
                io::ErrorKind::ConnectionRefused => RPCError::Unreachable(Unreachable::new(&e)),
                _ => RPCError::Network(NetworkError::new(&e)),
            })
    }
}

fn unexpected<E: std::error::Error>() -> RPCError<NodeId, BasicNode, E> {
    RPCError::Network(NetworkError::new(&io::Error::other(
        "reply of the wrong kind",
    )))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(Message::AppendEntries(rpc), &option).await? {
            Reply::AppendEntries(r) => {
                let target = self.target;
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
            }
            _ => Err(unexpected()),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        match self.call(Message::InstallSnapshot(rpc), &option).await? {
            Reply::InstallSnapshot(r) => {
                let target = self.target;
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
            }
            _ => Err(unexpected()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.call(Message::Vote(rpc), &option).await? {
            Reply::Vote(r) => {
                let target = self.target;
                r.map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
            }
            _ => Err(unexpected()),
        }
    }
}

async fn serve_write(raft: &Raft, req: Request) -> Result<Response, ServiceError> {
    if !command_fits(&req) {
        return Err(ServiceError::TooLarge);
    }
    match raft.client_write(req).await {
        Ok(r) => Ok(r.data),
        Err(e) => match e.forward_to_leader::<BasicNode>() {
            Some(f) => Err(ServiceError::NotLeader(
                f.leader_node.as_ref().map(|n| n.addr.clone()),
            )),
            None => Err(ServiceError::Other(e.to_string())),
        },
    }
}

async fn serve_read(
    raft: &Raft,
    sm: &StateMachine,
    key: Vec<u8>,
) -> Result<Option<Vec<u8>>, ServiceError> {
    match raft.ensure_linearizable().await {
        Ok(_) => sm.get(&key).map_err(|e| ServiceError::Other(e.to_string())),
        Err(e) => match e.forward_to_leader::<BasicNode>() {
            Some(f) => Err(ServiceError::NotLeader(
                f.leader_node.as_ref().map(|n| n.addr.clone()),
            )),
            None => Err(ServiceError::Other(e.to_string())),
        },
    }
}

async fn serve_conn(mut s: TcpStream, raft: Raft, sm: StateMachine) -> io::Result<()> {
    s.set_nodelay(true)?;
    loop {
        let msg = match recv_frame::<Message>(&mut s).await {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let reply = match msg {
            Message::AppendEntries(r) => Reply::AppendEntries(raft.append_entries(r).await),
            Message::Vote(r) => Reply::Vote(raft.vote(r).await),
            Message::InstallSnapshot(r) => Reply::InstallSnapshot(raft.install_snapshot(r).await),
            Message::Write(r) => Reply::Write(serve_write(&raft, r).await),
            Message::Read(k) => Reply::Read(serve_read(&raft, &sm, k).await),
        };
        send_frame(&mut s, &reply).await?;
    }
}

/// A running node: its Raft, its replica of the map, and its listener.
pub struct Node {
    pub id: NodeId,
    pub addr: SocketAddr,
    pub dir: PathBuf,
    pub raft: Raft,
    pub sm: StateMachine,
    server: JoinHandle<()>,
}

/// Raft timing for nodes on one machine: elections within a second of a leader's loss.
pub fn default_config() -> Config {
    Config {
        cluster_name: "strata-raft-kv".into(),
        heartbeat_interval: 100,
        election_timeout_min: 400,
        election_timeout_max: 800,
        ..Default::default()
    }
}

impl Node {
    /// Open the node's database in `dir` and serve Raft and clients on `addr`. A database still
    /// held by a node that was just stopped in this process is waited for, a few seconds at most.
    pub async fn start(
        id: NodeId,
        dir: impl AsRef<Path>,
        addr: SocketAddr,
        config: Config,
        opts: strata::Options,
    ) -> io::Result<Node> {
        let dir = dir.as_ref().to_path_buf();
        let config = Arc::new(config.validate().map_err(io::Error::other)?);
        let deadline = Instant::now() + Duration::from_secs(10);
        let (log, sm) = loop {
            match crate::open(&dir, opts.clone()) {
                Ok(s) => break s,
                Err(strata::Error::Locked { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
        };
        let raft = Raft::new(id, config, Network, log, sm.clone())
            .await
            .map_err(io::Error::other)?;
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (r, m) = (raft.clone(), sm.clone());
        let server = tokio::spawn(async move {
            // Dropped with the accept task: aborting it closes every connection too.
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((s, _)) = listener.accept().await {
                conns.spawn(serve_conn(s, r.clone(), m.clone()));
                while conns.try_join_next().is_some() {}
            }
        });
        Ok(Node {
            id,
            addr,
            dir,
            raft,
            sm,
            server,
        })
    }

    /// Make this node the first of a cluster of `members` (id and address each).
    pub async fn initialize(&self, members: &BTreeMap<NodeId, String>) -> io::Result<()> {
        let nodes: BTreeMap<NodeId, BasicNode> = members
            .iter()
            .map(|(id, a)| (*id, BasicNode { addr: a.clone() }))
            .collect();
        self.raft.initialize(nodes).await.map_err(io::Error::other)
    }

    /// Stop serving and shut Raft down, leaving strata as a crash would (no checkpoint).
    pub async fn crash(self) {
        self.server.abort();
        let _ = self.server.await;
        let _ = self.raft.shutdown().await;
    }
}

/// A client of the service: sends each request to the leader, following redirects and moving
/// on from nodes that do not answer, until `timeout` has passed.
pub struct Client {
    nodes: Vec<String>,
    leader: usize,
    conn: Option<TcpStream>,
    pub timeout: Duration,
}

impl Client {
    pub fn new(nodes: Vec<String>) -> Client {
        Client {
            nodes,
            leader: 0,
            conn: None,
            timeout: Duration::from_secs(20),
        }
    }

    async fn request(&mut self, msg: Message) -> Result<Reply, ServiceError> {
        let deadline = Instant::now() + self.timeout;
        let mut last = ServiceError::Other("no node answered".into());
        while Instant::now() < deadline {
            let addr = self.nodes[self.leader].clone();
            let outcome = exchange(&mut self.conn, &addr, &msg, Duration::from_secs(5)).await;
            let redirect = match outcome {
                Ok(Reply::Write(Err(ServiceError::NotLeader(to))))
                | Ok(Reply::Read(Err(ServiceError::NotLeader(to)))) => {
                    last = ServiceError::NotLeader(to.clone());
                    to
                }
                Ok(reply) => return Ok(reply),
                Err(e) => {
                    last = ServiceError::Other(format!("{addr}: {e}"));
                    None
                }
            };
            self.conn = None;
            self.leader = match redirect.and_then(|a| self.nodes.iter().position(|n| *n == a)) {
                Some(i) => i,
                None => {
                    // No leader known yet, or it is down: try the next node after a pause.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    (self.leader + 1) % self.nodes.len()
                }
            };
        }
        Err(last)
    }

    /// Replicate a command; returns once it is committed and applied on the leader.
    pub async fn write(&mut self, req: Request) -> Result<Response, ServiceError> {
        match self.request(Message::Write(req)).await? {
            Reply::Write(r) => r,
            _ => Err(ServiceError::Other("reply of the wrong kind".into())),
        }
    }

    pub async fn set(&mut self, key: &[u8], value: &[u8]) -> Result<Response, ServiceError> {
        self.write(Request::Set {
            key: key.to_vec(),
            value: value.to_vec(),
        })
        .await
    }

    /// A linearizable read at the leader.
    pub async fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, ServiceError> {
        match self.request(Message::Read(key.to_vec())).await? {
            Reply::Read(r) => r,
            _ => Err(ServiceError::Other("reply of the wrong kind".into())),
        }
    }
}
