//! `strata`, the command-line tool for strata databases: the argument grammar, dispatch to each
//! command, and how failures become messages and exit codes.

mod advise;
mod bench;
mod compare;
mod inspect;
mod job;
mod kv;
mod load;
mod profile;
mod report;
mod salvage;
mod sizes;
mod sweep;
mod tune;
mod version;

use std::io;
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strata::{Db, Options};

/// The process's allocator. strata's engines allocate per message (a key and a value, copied
/// again at every merge and drain): under glibc's malloc the allocator took a third of a load's
/// CPU, and with two threads (the drain thread frees what the writer allocated) more
/// (docs/performance.md). The library leaves the choice to its users; this tool, and the peers
/// it runs in its own process, use mimalloc, built not to ask for transparent huge pages
/// (`no_thp`): where the kernel grants them only on request, a fault in memory it gave back
/// and took again then zeroes 4 KiB, not 2 MiB; the huge pages' faults had put 4.5 ms into
/// the writer's drains and doubled the 1M-key load's commit p99 (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const AFTER_HELP: &str = "Exit codes: 0 success; 1 error (bad arguments, IO, key not found); \
2 corruption detected.";

#[derive(Parser)]
#[command(
    name = "strata",
    version,
    about = "Load, query and inspect strata databases",
    after_help = AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Load(load::LoadArgs),
    Put(kv::PutArgs),
    Get(kv::GetArgs),
    Delete(kv::DeleteArgs),
    Scan(kv::ScanArgs),
    /// A versioned database (seed 003): its version tree, clones, and reads and writes at a
    /// version
    #[command(subcommand)]
    Version(version::VersionCommand),
    Stats(inspect::StatsArgs),
    Check(inspect::CheckArgs),
    Dump(inspect::DumpArgs),
    Salvage(salvage::SalvageArgs),
    Profile(profile::ProfileArgs),
    Tune(tune::TuneArgs),
    Advise(advise::AdviseArgs),
    #[command(subcommand)]
    Bench(bench::Experiment),
    Report(job::ReportArgs),
}

/// Why a command failed; each kind has its exit code.
#[derive(Debug)]
pub enum Failure {
    /// From the library: exit 2 for corruption, 1 otherwise.
    Db(strata::Error),
    /// `check` found a problem: exit 2 whatever it is.
    CheckFailed(strata::Error),
    /// The arguments make no sense: exit 1.
    Invalid(String),
    /// The database returned something other than what was written: exit 2.
    WrongData(String),
    /// Writing the output failed; a closed pipe (`| head`) is not an error.
    Output(io::Error),
}

impl From<strata::Error> for Failure {
    fn from(e: strata::Error) -> Self {
        Failure::Db(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Output(e)
    }
}

impl Failure {
    /// Print the message and give the exit code.
    fn report(self) -> ExitCode {
        let (message, code) = match self {
            Failure::Db(e) => {
                let code = if e.is_corruption() { 2 } else { 1 };
                (e.to_string(), code)
            }
            Failure::CheckFailed(e) => (e.to_string(), 2),
            Failure::Invalid(m) => (m, 1),
            Failure::WrongData(m) => (m, 2),
            Failure::Output(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                return ExitCode::SUCCESS
            }
            Failure::Output(e) => (format!("writing output: {e}"), 1),
        };
        eprintln!("error: {message}");
        ExitCode::from(code)
    }
}

/// Open a database that must already exist; a missing one is an error, not created.
pub fn open_existing(dir: &Path) -> Result<Db, Failure> {
    Ok(Db::open(dir, Options::default().create_if_missing(false))?)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; usage errors exit 1, so that 2 always
            // means corruption.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let outcome = match cli.command {
        Command::Load(a) => load::run(a),
        Command::Bench(e) => bench::run(e),
        Command::Report(a) => job::run(a),
        Command::Put(a) => kv::put(a),
        Command::Get(a) => kv::get(a),
        Command::Delete(a) => kv::delete(a),
        Command::Scan(a) => kv::scan(a),
        Command::Version(c) => version::run(c),
        Command::Stats(a) => inspect::stats(a),
        Command::Check(a) => inspect::check(a),
        Command::Dump(a) => inspect::dump(a),
        Command::Salvage(a) => salvage::run(a),
        Command::Profile(a) => profile::run(a),
        Command::Tune(a) => tune::run(a),
        Command::Advise(a) => advise::run(a),
    };
    outcome.unwrap_or_else(Failure::report)
}
