//! `whyslow serve`: the continuous profiling agent, its flags turned into the serve crate's options.

use super::push::{labels, push_options, PushArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on. Anything but loopback requires --token-file.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: std::net::SocketAddr,
    /// Where the store (whyslow.db) and the periodic files live.
    #[arg(long, default_value = "whyslow-data")]
    pub data_dir: PathBuf,
    /// TOML file with `[[target]]` definitions (as the API takes them), kept in the store by name.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// File holding the bearer token every request must carry.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Remove windows (and periodic files) older than this: 30m, 12h, 7d.
    #[arg(long, default_value = "7d")]
    pub retention: String,
    /// Keep the store's files (database and its log) under this size: 500MiB, 1GiB (oldest windows go
    /// first).
    #[arg(long, default_value = "1GiB")]
    pub max_disk: String,
    /// A host name requests may use in their Host header besides IP addresses and localhost
    /// (repeatable); other names are refused (DNS rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// Profile every process of the host (a target named all-processes matching all, on-CPU at 19 Hz,
    /// labelled by each process's systemd unit, container and pod), with or without other targets.
    #[arg(long)]
    pub all: bool,
    /// Periodic files may only be written under this directory (default: DATA_DIR/output).
    #[arg(long)]
    pub output_root: Option<PathBuf>,
    /// Do not diagnose every window (findings, regressions and webhooks are then off).
    #[arg(long)]
    pub no_doctor: bool,
    /// POST each regression and each finding that starts to this URL as JSON (repeatable; retried with
    /// backoff, each event once).
    #[arg(long = "webhook", value_name = "URL")]
    pub webhooks: Vec<String>,
    #[command(flatten)]
    pub push: PushArgs,
}

/// `10GiB`, `500MiB`, `1000000` (bytes); KB/MB/GB are powers of 1000.
fn size_bytes(what: &str, s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => bail!("{what} '{s}' is not a size like 500MiB or 1GiB"),
    };
    n.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|&b| b > 0)
        .ok_or_else(|| anyhow!("{what} '{s}' is not a size like 500MiB or 1GiB"))
}

pub fn serve(a: crate::ServeArgs) -> Result<()> {
    let retention = whyslow_serve::timespec::duration_ns(&a.retention)
        .filter(|&n| n > 0)
        .ok_or_else(|| anyhow!("--retention '{}' is not a duration like 30m, 12h or 7d", a.retention))?;
    let mut targets = match &a.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            whyslow_serve::parse_config(&text).with_context(|| format!("{}", path.display()))?
        }
        None => Vec::new(),
    };
    if a.all {
        if targets.iter().any(|t| t.name.as_deref() == Some(whyslow_serve::ALL_TARGET)) {
            bail!(
                "--all defines the target '{}': the config file has one of that name",
                whyslow_serve::ALL_TARGET
            );
        }
        targets.push(whyslow_serve::all_target());
    }
    let token = match &a.token_file {
        Some(path) => {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .with_context(|| format!("cannot read {}", path.display()))?
                .permissions()
                .mode();
            // As ssh does with private keys: a secret others can read is no secret.
            if mode & 0o077 != 0 {
                bail!(
                    "{} is readable or writable by others (mode {:o}): chmod 600 it",
                    path.display(),
                    mode & 0o777
                );
            }
            let t =
                std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            let t = t.trim().to_string();
            if t.len() < 16 {
                bail!("the token in {} is shorter than 16 characters", path.display());
            }
            Some(t)
        }
        None => None,
    };
    if a.no_doctor && !a.webhooks.is_empty() {
        bail!("--webhook sends the doctor's events: it cannot go with --no-doctor");
    }
    if let Some(w) = a.webhooks.iter().find(|w| !(w.starts_with("http://") || w.starts_with("https://"))) {
        bail!("--webhook '{w}' is not an http:// or https:// URL");
    }
    let opts = whyslow_serve::ServeOptions {
        listen: a.listen,
        output_root: a.output_root.unwrap_or_else(|| a.data_dir.join("output")),
        data_dir: a.data_dir,
        token,
        retention: Duration::from_nanos(retention),
        max_disk: size_bytes("--max-disk", &a.max_disk)?,
        targets,
        max_body: 1 << 20,
        push: push_options(&a.push)?,
        push_labels: labels(&a.push.labels)?,
        push_per_process: a.push.per_process,
        allow_hosts: a.allow_hosts,
        doctor: !a.no_doctor,
        webhooks: a.webhooks,
    };
    Ok(whyslow_serve::run(opts)?)
}
