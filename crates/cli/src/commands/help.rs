//! The commands about whyslow itself, generated from its clap definition (given by main): help, man
//! pages and shell completions. They must stay what clap makes of the definition, byte for byte.

use anyhow::{anyhow, Context, Result};
use std::path::Path;

/// `whyslow help [COMMAND...]`: the help of the command named, exactly as `whyslow COMMAND --help`.
pub fn help(cli: clap::Command, path: &[String]) -> Result<()> {
    let mut at = cli.clone();
    for name in path {
        let known: Vec<String> = at.get_subcommands().map(|c| c.get_name().to_string()).collect();
        at = at.find_subcommand(name).cloned().ok_or_else(|| {
            anyhow!(
                "no command '{name}'{}",
                whyslow_model::did_you_mean(&whyslow_model::close_matches(
                    name,
                    known.iter().map(String::as_str),
                    3
                ))
            )
        })?;
    }
    let argv = std::iter::once("whyslow").chain(path.iter().map(String::as_str)).chain(["--help"]);
    match cli.try_get_matches_from(argv) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => Ok(e.print()?),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(()),
    }
}

/// whyslow.1 and whyslow-SUBCOMMAND.1 in `dir`.
pub fn man_pages(cli: clap::Command, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pages = vec![("whyslow".to_string(), cli.clone())];
    for c in cli.get_subcommands() {
        let name = format!("whyslow-{}", c.get_name());
        // A page's title is its command's name; clap takes names as 'static (a few bytes, once).
        let title: &'static str = Box::leak(name.clone().into_boxed_str());
        pages.push((name, c.clone().name(title)));
    }
    for (name, cmd) in pages {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out)?;
        let path = dir.join(format!("{name}.1"));
        whyslow_model::file::write_atomic(&path, &out)?;
    }
    Ok(())
}

/// A completion script for `shell` on standard output.
pub fn completions(mut cli: clap::Command, shell: clap_complete::Shell) -> Result<()> {
    clap_complete::generate(shell, &mut cli, "whyslow", &mut std::io::stdout());
    Ok(())
}
