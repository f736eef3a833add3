//! `whyslow view FILE [FILE2]`: the serve crate's web UI over recordings.

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct ViewArgs {
    /// Recording or imported profile (anything `report` reads); a second one for the diff view
    /// (before, after).
    #[arg(default_value = "whyslow.data", num_args = 1..=2)]
    pub files: Vec<PathBuf>,
    /// Port on 127.0.0.1 [default: a free one].
    #[arg(long)]
    pub port: Option<u16>,
    /// Start a browser on the URL (xdg-open, else chromium).
    #[arg(long)]
    pub open: bool,
}

pub fn view(a: crate::ViewArgs) -> Result<()> {
    let mut files = Vec::new();
    for path in &a.files {
        let opts = whyslow_import::ImportOptions::default();
        let profile = whyslow_import::load(&path.to_string_lossy(), &opts)
            .with_context(|| format!("cannot read {}", path.display()))?;
        files.push(whyslow_serve::ViewFile { name: path.display().to_string(), profile });
    }
    let listen = std::net::SocketAddr::from(([127, 0, 0, 1], a.port.unwrap_or(0)));
    let open = a.open;
    whyslow_serve::view(files, listen, |addr| {
        let url = format!("http://{addr}/");
        println!("whyslow view: {url} (Ctrl-C stops)");
        if open {
            let started = ["xdg-open", "chromium", "chromium-browser"].iter().any(|b| {
                std::process::Command::new(b)
                    .arg(&url)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn()
                    .is_ok()
            });
            if !started {
                eprintln!("whyslow view: no browser found (xdg-open, chromium): open {url} yourself");
            }
        }
    })?;
    Ok(())
}
