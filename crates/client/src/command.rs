//! command: the `Command` builder, std's `Command` plus guardian's options. The options are
//! `treeguardian_spec::options::Opt`, the table guardian's own parser, its man page and
//! `spec/options.json` come from: [`OPTIONS`] lists the ones the builder sets, and each is
//! written as `--{long}` with a value when its kind takes one, so a renamed or retyped option
//! reaches this crate with no second list to update.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use treeguardian_spec::options::Opt;

/// The guardian options the builder can set, in the order they are written.
pub(crate) const OPTIONS: &[Opt] = &[
    Opt::Grace,
    Opt::StopSignal,
    Opt::ForwardTo,
    Opt::Timeout,
    Opt::WaitDescendants,
    Opt::NoParentWatch,
    Opt::Cgroup,
    Opt::MemoryMax,
    Opt::PidsMax,
    Opt::CpuMax,
];

/// `--{long}` of an option.
pub(crate) fn flag(opt: Opt) -> String {
    format!("--{}", opt.long())
}

/// The options through which the crate hands guardian the events pipe (not builder options):
/// an inherited fd, or a path guardian opens (see `sys::Route`).
pub(crate) const EVENTS_FD: Opt = Opt::EventsFd;
pub(crate) const EVENTS_FILE: Opt = Opt::EventsFile;

#[derive(Clone, Debug)]
enum EnvOp {
    Set(OsString, OsString),
    Remove(OsString),
    Clear,
}

/// A provider to run under guardian: `std::process::Command`'s builder (program, args,
/// environment, working directory, stdio) plus guardian's options. The environment, directory
/// and stdio are guardian's, which passes them on to the provider unchanged (guardian removes
/// its own `GUARDIAN_*` variables first).
#[derive(Debug)]
pub struct Command {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    env: Vec<EnvOp>,
    cwd: Option<PathBuf>,
    pub(crate) stdin: Option<Stdio>,
    pub(crate) stdout: Option<Stdio>,
    pub(crate) stderr: Option<Stdio>,
    pub(crate) guardian: Option<PathBuf>,
    options: Vec<(Opt, Option<OsString>)>,
}

/// `10s`, `250ms`, ... exactly: guardian reads `ns`.
fn duration(d: Duration) -> OsString {
    format!("{}ns", d.as_nanos()).into()
}

impl Command {
    /// A provider command, like `std::process::Command::new`.
    pub fn new(program: impl AsRef<OsStr>) -> Command {
        Command {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdin: None,
            stdout: None,
            stderr: None,
            guardian: None,
            options: Vec::new(),
        }
    }
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Command {
        self.args.push(arg.as_ref().to_owned());
        self
    }
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&mut self, args: I) -> &mut Command {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }
    pub fn env(&mut self, key: impl AsRef<OsStr>, val: impl AsRef<OsStr>) -> &mut Command {
        self.env.push(EnvOp::Set(key.as_ref().to_owned(), val.as_ref().to_owned()));
        self
    }
    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Command
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self.env(k, v);
        }
        self
    }
    pub fn env_remove(&mut self, key: impl AsRef<OsStr>) -> &mut Command {
        self.env.push(EnvOp::Remove(key.as_ref().to_owned()));
        self
    }
    /// Starts guardian (and so the provider) with only the variables set after this call. The
    /// guardian binary is still found through this process's `GUARDIAN_BIN` and `PATH`.
    pub fn env_clear(&mut self) -> &mut Command {
        self.env.push(EnvOp::Clear);
        self
    }
    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Command {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }
    pub fn stdin(&mut self, cfg: impl Into<Stdio>) -> &mut Command {
        self.stdin = Some(cfg.into());
        self
    }
    pub fn stdout(&mut self, cfg: impl Into<Stdio>) -> &mut Command {
        self.stdout = Some(cfg.into());
        self
    }
    pub fn stderr(&mut self, cfg: impl Into<Stdio>) -> &mut Command {
        self.stderr = Some(cfg.into());
        self
    }

    /// The guardian binary to run. Without it: `$GUARDIAN_BIN`, then `guardian` on `$PATH`
    /// (of this process).
    pub fn guardian(&mut self, path: impl AsRef<Path>) -> &mut Command {
        self.guardian = Some(path.as_ref().to_owned());
        self
    }

    fn set(&mut self, opt: Opt, value: Option<OsString>) -> &mut Command {
        self.options.retain(|(o, _)| *o != opt);
        self.options.push((opt, value));
        self
    }
    fn switch(&mut self, opt: Opt, on: bool) -> &mut Command {
        if on { self.set(opt, None) } else { self.unset(opt) }
    }
    fn unset(&mut self, opt: Opt) -> &mut Command {
        self.options.retain(|(o, _)| *o != opt);
        self
    }

    /// `--grace`: time between the stop signal and SIGKILL (guardian's default: 1 s).
    pub fn grace(&mut self, grace: Duration) -> &mut Command {
        self.set(Opt::Grace, Some(duration(grace)))
    }
    /// `--stop-signal`: the signal the tree hears on a stop (`"TERM"`, `"INT"`, `"15"`).
    pub fn stop_signal(&mut self, signal: &str) -> &mut Command {
        self.set(Opt::StopSignal, Some(signal.into()))
    }
    /// `--forward-to group`: forwarded signals go to the provider's process group, not only the
    /// provider.
    pub fn forward_to_group(&mut self, on: bool) -> &mut Command {
        if on { self.set(Opt::ForwardTo, Some("group".into())) } else { self.unset(Opt::ForwardTo) }
    }
    /// `--timeout`: then a bounded stop; guardian's status is 124.
    pub fn timeout(&mut self, timeout: Duration) -> &mut Command {
        self.set(Opt::Timeout, Some(duration(timeout)))
    }
    /// `--wait-descendants`: after the provider exits, let descendants finish.
    pub fn wait_descendants(&mut self, on: bool) -> &mut Command {
        self.switch(Opt::WaitDescendants, on)
    }
    /// `--no-parent-watch`: do not tear down when this process dies.
    pub fn no_parent_watch(&mut self, on: bool) -> &mut Command {
        self.switch(Opt::NoParentWatch, on)
    }
    /// `--cgroup`: `"auto"` or a delegated cgroup v2 directory to make the provider's leaf in.
    pub fn cgroup(&mut self, parent: impl AsRef<OsStr>) -> &mut Command {
        self.set(Opt::Cgroup, Some(parent.as_ref().to_owned()))
    }
    /// `--memory-max` of the leaf (`"512M"`, `"2G"`, bytes); needs [`Command::cgroup`].
    pub fn memory_max(&mut self, size: &str) -> &mut Command {
        self.set(Opt::MemoryMax, Some(size.into()))
    }
    /// `--pids-max` of the leaf; needs [`Command::cgroup`].
    pub fn pids_max(&mut self, n: u64) -> &mut Command {
        self.set(Opt::PidsMax, Some(n.to_string().into()))
    }
    /// `--cpu-max` of the leaf (`"0.5"`, `"2"`, `"QUOTA PERIOD"`); needs [`Command::cgroup`].
    pub fn cpu_max(&mut self, cpus: &str) -> &mut Command {
        self.set(Opt::CpuMax, Some(cpus.into()))
    }

    /// guardian's arguments before `--events-fd`: the options set, in [`OPTIONS`] order.
    pub(crate) fn option_args(&self) -> Vec<OsString> {
        let mut out = Vec::new();
        for opt in OPTIONS {
            if let Some((_, value)) = self.options.iter().find(|(o, _)| o == opt) {
                out.push(OsString::from(flag(*opt)));
                if opt.kind().takes_value() {
                    out.push(value.clone().unwrap_or_default());
                }
            }
        }
        out
    }

    /// The std command that starts `guardian` with these settings and `events` (the events
    /// option and its value), without stdio.
    pub(crate) fn std_command(&self, guardian: &Path, events: (Opt, &OsStr)) -> std::process::Command {
        let mut cmd = std::process::Command::new(guardian);
        cmd.args(self.option_args()).arg(flag(events.0)).arg(events.1).arg("--").arg(&self.program);
        cmd.args(&self.args);
        for op in &self.env {
            match op {
                EnvOp::Set(k, v) => cmd.env(k, v),
                EnvOp::Remove(k) => cmd.env_remove(k),
                EnvOp::Clear => cmd.env_clear(),
            };
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every option the builder writes is one the main command takes, and the ones set as a
    /// flag (no value) are flags in the table.
    #[test]
    fn options_are_the_main_commands() {
        use treeguardian_spec::options::Commands;
        for opt in OPTIONS.iter().chain([&EVENTS_FD, &EVENTS_FILE]) {
            assert!(opt.commands().has(Commands::MAIN), "{opt:?}");
        }
        let flags: Vec<Opt> = OPTIONS.iter().copied().filter(|o| !o.kind().takes_value()).collect();
        assert_eq!(flags, [Opt::WaitDescendants, Opt::NoParentWatch]);
    }

    #[test]
    fn options_map_to_flags_in_table_order() {
        let mut c = Command::new("p");
        c.timeout(Duration::from_secs(2))
            .grace(Duration::from_millis(250))
            .wait_descendants(true)
            .cgroup("auto")
            .pids_max(5)
            .forward_to_group(true)
            .grace(Duration::from_millis(300));
        let args: Vec<String> = c.option_args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            args,
            [
                "--grace",
                "300000000ns",
                "--forward-to",
                "group",
                "--timeout",
                "2000000000ns",
                "--wait-descendants",
                "--cgroup",
                "auto",
                "--pids-max",
                "5"
            ]
        );
        c.wait_descendants(false).forward_to_group(false);
        assert!(!c.option_args().iter().any(|a| a == "--wait-descendants" || a == "--forward-to"));
    }
}
