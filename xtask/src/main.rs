//! xtask: generates guardian's man page (`man/guardian.1`) and shell completions
//! (`completions/`) from the clap definition in `src/cli.rs`, so the guardian binary itself
//! carries neither clap_mangen nor clap_complete.
//!
//! `cargo run -p xtask -- man DIR` writes `DIR/guardian.1`; `cargo run -p xtask -- completions
//! DIR` writes `DIR/guardian.bash`, `DIR/_guardian` and `DIR/guardian.fish`. The output is
//! deterministic (no date), so `make check-generated` can diff it against the checked-in files.

// The CLI definition, shared with the guardian binary.
#[allow(dead_code)]
#[path = "../../src/cli.rs"]
mod cli;

// cli.rs parses --stop-signal through guardian's `signals`, which uses `sys` (src/sys/mod.rs
// brings its files along); include both so the definition (and cli.rs's own tests) behave
// exactly as in the binary.
#[allow(dead_code)]
#[path = "../../src/signals.rs"]
mod signals;
#[allow(dead_code, unused_imports)]
#[path = "../../src/sys/mod.rs"]
mod sys;

mod man;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["man", dir] => write_man(Path::new(dir)),
        ["completions", dir] => write_completions(Path::new(dir)),
        _ => {
            eprintln!("usage: xtask man DIR | xtask completions DIR");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(files) => {
            for f in files {
                println!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The guardian command as the binary builds it, with the guardian package's version (this
/// crate's own `CARGO_PKG_VERSION` would be xtask's).
pub fn command() -> clap::Command {
    cli::Cli::command().version(guardian_version())
}

fn guardian_version() -> &'static str {
    // The workspace root's Cargo.toml is guardian's; keep this in step with it (checked below).
    const CARGO_TOML: &str = include_str!("../../Cargo.toml");
    CARGO_TOML
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or("unknown")
}

fn write_man(dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let path = dir.join("guardian.1");
    fs::write(&path, man::render(command())?)?;
    Ok(vec![path])
}

fn write_completions(dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = command();
        let path = clap_complete::generate_to(shell, &mut cmd, "guardian", dir)?;
        written.push(path);
    }
    Ok(written)
}
