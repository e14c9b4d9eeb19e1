//! Pebble and bbolt, which are Go libraries, through the driver in `compare/go`
//! (`strata-compare-go`): a Go port of the harness (`gen`, `workload`, `runner`, `measure`) that
//! reads the same `Spec` as JSON, runs it on one engine in a directory and prints a `RunResult`
//! as JSON, so both are driven and measured exactly as the Rust engines are (the shared vectors
//! in `compare/go/testdata/vectors.json` pin the record generator on both sides).
//!
//! `available` finds `go` on the PATH and builds the driver into the cargo target directory
//! (again whenever a source is newer than the binary); when `go` is missing or the build fails
//! it says why, and the harness skips these two engines with that note. `run` runs one engine
//! in its own process, so the process counters and peak memory are that engine's alone.

use std::ffi::OsStr;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::SystemTime;

use strata_bench::runner::RunResult;
use strata_bench::workload::Spec;

/// The engines the Go driver runs, by their names in results.
pub const ENGINES: [&str; 2] = ["pebble", "bbolt"];

/// The driver's binary name, in the cargo target directory.
pub const BINARY: &str = "strata-compare-go";

/// The driver's Go module.
pub fn source_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../compare/go"))
}

fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// `CARGO_TARGET_DIR` (relative to the workspace root when relative) or the workspace's
/// `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

/// The `go` command on the PATH, if there is one.
pub fn go_command() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("go"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The driver, built if it is missing or older than its sources; or why Pebble and bbolt
/// cannot run here. Builds at most once per process.
pub fn available() -> Result<PathBuf, String> {
    static BUILT: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = built.as_ref() {
        return r.clone();
    }
    let r = build();
    *built = Some(r.clone());
    r
}

fn build() -> Result<PathBuf, String> {
    let go = go_command()
        .ok_or("`go` is not installed (not found on the PATH), so Pebble and bbolt are skipped")?;
    let src = source_dir();
    let src = src
        .canonicalize()
        .map_err(|e| format!("the Go driver's sources ({}): {e}", src.display()))?;
    let target = target_dir();
    let out = target.join(BINARY);
    let newest = newest_source(&src)
        .map_err(|e| format!("reading the Go driver's sources in {}: {e}", src.display()))?;
    let built_at = std::fs::metadata(&out).and_then(|m| m.modified()).ok();
    if built_at.is_some_and(|b| b >= newest) {
        return Ok(out);
    }
    std::fs::create_dir_all(&target).map_err(|e| format!("creating {}: {e}", target.display()))?;
    // Build under a private name and rename, so that concurrent builds (test processes) never
    // run or overwrite a half-written binary.
    let tmp = target.join(format!("{BINARY}.tmp{}", std::process::id()));
    let output = Command::new(&go)
        .args([
            OsStr::new("build"),
            OsStr::new("-buildvcs=false"),
            OsStr::new("-o"),
        ])
        .arg(&tmp)
        .arg(".")
        .current_dir(&src)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", go.display()))?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "building the Go driver (`go build` in {}) failed, so Pebble and bbolt are skipped: {}",
            src.display(),
            tail(&output.stderr)
        ));
    }
    std::fs::rename(&tmp, &out)
        .map_err(|e| format!("moving the Go driver to {}: {e}", out.display()))?;
    Ok(out)
}

/// The latest modification time of the files the binary is built from (Go sources other than
/// tests, go.mod, go.sum).
fn newest_source(dir: &Path) -> std::io::Result<SystemTime> {
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if kind.is_dir() {
            if name != "testdata" && !name.starts_with('.') {
                newest = newest.max(newest_source(&path)?);
            }
        } else if (name.ends_with(".go") && !name.ends_with("_test.go"))
            || name == "go.mod"
            || name == "go.sum"
        {
            newest = newest.max(entry.metadata()?.modified()?);
        }
    }
    Ok(newest)
}

/// The last lines of a process's stderr, for an error message.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let tail = lines[lines.len().saturating_sub(20)..].join("\n");
    if tail.is_empty() {
        "(no message)".into()
    } else {
        tail
    }
}

/// Run `spec` on `engine` ("pebble" or "bbolt") in `dir` (created if missing; must not hold
/// another database) with the driver from `available`, in its own process.
pub fn run(driver: &Path, engine: &str, spec: &Spec, dir: &Path) -> Result<RunResult, String> {
    if !ENGINES.contains(&engine) {
        return Err(format!(
            "the Go driver runs {}, not {engine:?}",
            ENGINES.join(" and ")
        ));
    }
    let fail = |what: String| format!("{engine} (Go driver): {what}");
    let json = serde_json::to_vec(spec).map_err(|e| fail(format!("encoding the spec: {e}")))?;
    let mut file = tempfile::Builder::new()
        .prefix("strata-spec-")
        .suffix(".json")
        .tempfile()
        .map_err(|e| fail(format!("creating the spec file: {e}")))?;
    file.write_all(&json)
        .and_then(|()| file.flush())
        .map_err(|e| fail(format!("writing the spec file: {e}")))?;
    let output = Command::new(driver)
        .arg("--engine")
        .arg(engine)
        .arg("--spec")
        .arg(file.path())
        .arg("--dir")
        .arg(dir)
        .arg("--quiet")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| fail(format!("running {}: {e}", driver.display())))?;
    if !output.status.success() {
        return Err(fail(format!(
            "{} ({})",
            tail(&output.stderr),
            output.status
        )));
    }
    let result: RunResult = serde_json::from_slice(&output.stdout).map_err(|e| {
        fail(format!(
            "its output does not parse as a RunResult: {e}: {}",
            tail(&output.stdout)
        ))
    })?;
    if result.engine != engine {
        return Err(fail(format!("it reported engine {:?}", result.engine)));
    }
    Ok(result)
}
