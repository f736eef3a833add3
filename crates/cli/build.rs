//! The version string: the package version and, built from a git checkout, the revision (with
//! `-dirty` when the tree had changes), as `whyslow --version` prints it.

fn main() {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let version = env!("CARGO_PKG_VERSION");
    let full = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(rev) => {
            let dirty =
                git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            format!("{version} ({rev}{})", if dirty { "-dirty" } else { "" })
        }
        None => version.to_string(),
    };
    println!("cargo:rustc-env=WHYSLOW_VERSION={full}");
    // A new commit moves the branch HEAD names (or HEAD itself); a checkout that is no git tree has none.
    let git_dir = git(&["rev-parse", "--git-dir"]).map(std::path::PathBuf::from);
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    if let Some(dir) = git_dir {
        for file in ["HEAD", "index", "packed-refs"].iter().map(|f| f.to_string()).chain(branch) {
            let path = dir.join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
}
