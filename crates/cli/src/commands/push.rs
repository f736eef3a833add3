//! `whyslow push`: one recording or imported profile sent to Pyroscope or OTLP; the --push flags,
//! which serve takes too.

use super::recording::load;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

/// Where and how profiles are pushed (serve: every stored window; push: one file).
#[derive(Args)]
pub struct PushArgs {
    /// Backend: pyroscope=URL (Push API), pyroscope-ingest=URL (legacy /ingest), otlp=URL (OTLP
    /// profiles over HTTP/protobuf, a collector's :4318), otlp-grpc=URL (OTLP over gRPC, :4317).
    /// Repeatable.
    #[arg(long = "push", value_name = "KIND=URL")]
    pub to: Vec<String>,
    /// Label added to every pushed series (repeatable).
    #[arg(long = "push-label", value_name = "NAME=VALUE")]
    pub labels: Vec<String>,
    /// Tenant sent as X-Scope-OrgID.
    #[arg(long = "push-tenant")]
    pub tenant: Option<String>,
    /// File holding `user:password` for HTTP basic authentication.
    #[arg(long = "push-basic-auth-file")]
    pub basic_auth_file: Option<PathBuf>,
    /// File holding a bearer token.
    #[arg(long = "push-bearer-file")]
    pub bearer_file: Option<PathBuf>,
    /// A pid label on each series (one series per process: mind the cardinality).
    #[arg(long = "push-per-process")]
    pub per_process: bool,
}

#[derive(Args)]
pub struct PushFileArgs {
    /// Recording or profile to push (anything `report` reads).
    pub file: PathBuf,
    /// The service the series are named by (default: the recorded command's name).
    #[arg(long)]
    pub service_name: Option<String>,
    #[command(flatten)]
    pub push: PushArgs,
}

pub(super) fn labels(list: &[String]) -> Result<Vec<(String, String)>> {
    list.iter()
        .map(|l| match l.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("--push-label '{l}' is not NAME=VALUE"),
        })
        .collect()
}

pub(super) fn push_options(a: &PushArgs) -> Result<Vec<whyslow_serve::PushOptions>> {
    let secret = |path: &Option<std::path::PathBuf>| -> Result<Option<String>> {
        path.as_ref()
            .map(|p| {
                std::fs::read_to_string(p)
                    .map(|s| s.trim().to_string())
                    .with_context(|| format!("cannot read {}", p.display()))
            })
            .transpose()
    };
    let auth = whyslow_push::Auth {
        tenant: a.tenant.clone(),
        basic: secret(&a.basic_auth_file)?,
        bearer: secret(&a.bearer_file)?,
    };
    a.to.iter()
        .map(|t| {
            let backend = whyslow_push::Backend::parse(t).map_err(|e| anyhow!("--push: {e}"))?;
            Ok(whyslow_serve::PushOptions { backend, auth: auth.clone() })
        })
        .collect()
}

pub fn push(a: crate::PushFileArgs) -> Result<()> {
    let targets = push_options(&a.push)?;
    if targets.is_empty() {
        bail!("push needs a backend: --push pyroscope=URL, pyroscope-ingest=URL, otlp=URL or otlp-grpc=URL");
    }
    let p = load(&a.file, None)?;
    let program = p.meta.command.first().map(|c| whyslow_model::basename(c).to_string()).unwrap_or_default();
    let labels = whyslow_push::Labels {
        service: whyslow_push::service_name(a.service_name.clone(), &program),
        process: program,
        hostname: p.meta.hostname.clone(),
        pid: a.push.per_process.then(|| p.meta.target_pids.first().copied()).flatten(),
        extra: labels(&a.push.labels)?,
    };
    for t in &targets {
        let sent =
            whyslow_push::Sender::new(&t.backend, &t.auth).send(&labels, &p).map_err(|e| anyhow!("{e}"))?;
        eprintln!("whyslow: pushed {} ({} bytes) to {}", a.file.display(), sent.bytes, t.backend.name());
        if sent.rejected_profiles > 0 || !sent.message.is_empty() {
            eprintln!(
                "whyslow: {} rejected {} profiles: {}",
                t.backend.name(),
                sent.rejected_profiles,
                sent.message
            );
        }
    }
    Ok(())
}
