//! xtask: generates, from the option table (`crates/spec/src/options.rs`) through the clap
//! definition built from it (`treeguardian_spec::clap`, so the guardian binary carries neither
//! clap nor clap_mangen nor clap_complete), guardian's man page (`man/guardian.1`), help texts
//! (`man/help/`) and shell completions (`completions/`), and `spec/options.json`, the option
//! list the Node, Python and Rust drivers are checked against.
//!
//! `cargo run -p xtask -- man DIR` writes `DIR/guardian.1` and `DIR/help/*.txt` (what
//! `guardian -h` and `--help`, and those of `sweep` and `doctor`, print; guardian includes
//! them with `include_str!`); `cargo run -p xtask -- completions DIR` writes
//! `DIR/guardian.bash`, `DIR/_guardian` and `DIR/guardian.fish`; `cargo run -p xtask -- options
//! DIR` writes `DIR/options.json`. The output is deterministic (no date), so `make
//! check-generated` can diff it against the checked-in files.

mod man;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::Shell;

fn main() -> ExitCode {
    // clap reads an option's variable when the definition is built and shows its value in the
    // help (`[env: GUARDIAN_GRACE=5s]`): the generated files must not depend on who runs this.
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("GUARDIAN_")) {
            // SAFETY: xtask has a single thread, so nothing reads the environment concurrently.
            unsafe { std::env::remove_var(name) };
        }
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["man", dir] => write_man(Path::new(dir)),
        ["completions", dir] => write_completions(Path::new(dir)),
        ["options", dir] => write_options(Path::new(dir)),
        _ => {
            eprintln!("usage: xtask man DIR | xtask completions DIR | xtask options DIR");
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
    treeguardian_spec::clap::command(guardian_version(), &|_| None)
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
    let mut written = vec![path];
    written.extend(write_help(&dir.join("help"))?);
    Ok(written)
}

/// The help texts guardian prints, as clap printed them when it parsed guardian's command line:
/// `-h` the short rendering, `--help` the long one (`long_about` makes it differ); a subcommand,
/// which has no long help, prints its short rendering for both. Built as clap builds them when
/// it parses (so a subcommand's usage line says `guardian sweep`). `[env: NAME=]` is filled in
/// with the variable's value when guardian prints it, as clap did.
fn write_help(dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let mut cmd = command();
    cmd.build();
    let mut written = Vec::new();
    let mut write = |name: &str, text: clap::builder::StyledStr| -> io::Result<()> {
        let path = dir.join(name);
        fs::write(&path, text.to_string())?;
        written.push(path);
        Ok(())
    };
    write("guardian.txt", cmd.render_help())?;
    write("guardian.long.txt", cmd.render_long_help())?;
    for sub in ["sweep", "doctor"] {
        let sub_cmd = cmd.find_subcommand_mut(sub).ok_or_else(|| io::Error::other(format!("no subcommand {sub}")))?;
        write(&format!("guardian-{sub}.txt"), sub_cmd.render_help())?;
    }
    Ok(written)
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

fn write_options(dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    let path = dir.join("options.json");
    fs::write(&path, treeguardian_spec::options::to_json())?;
    Ok(vec![path])
}
