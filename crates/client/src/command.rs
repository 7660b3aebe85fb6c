//! command: what a spawn is made of. [`Builder`] holds `std::process::Command`'s settings
//! (program, args, environment, directory, stdio, uid, gid, process group) plus guardian's
//! options; [`builder_methods!`] gives both public `Command`s (the blocking [`Command`] here and
//! `tokio::Command`) the same methods, with std's names and signatures. The options are
//! `treeguardian_spec::options::Opt`, the table guardian's own parser, its man page and
//! `spec/options.json` come from: [`OPTIONS`] lists the ones the builder sets, and each is
//! written as `--{long}` with a value when its kind takes one, so a renamed or retyped option
//! reaches this crate with no second list to update. Durations follow spec/driver.json
//! (`crate::driver`): whole nanoseconds, and guardian's own message for one it would refuse.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use treeguardian_spec::options::Opt;

use crate::driver;

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
pub(crate) enum EnvOp {
    Set(OsString, OsString),
    Remove(OsString),
    Clear,
}

/// Everything a spawn is made of; shared by both public `Command`s.
#[derive(Debug)]
pub(crate) struct Builder {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<EnvOp>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) stdin: Option<Stdio>,
    pub(crate) stdout: Option<Stdio>,
    pub(crate) stderr: Option<Stdio>,
    pub(crate) guardian: Option<PathBuf>,
    options: Vec<(Opt, Option<OsString>)>,
    /// A value guardian would refuse, with guardian's message: the next spawn's error.
    pub(crate) invalid: Option<String>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) pgroup: Option<i32>,
    pub(crate) kill_on_drop: bool,
}

/// A duration as guardian reads it: whole nanoseconds (spec/driver.json's resolution; a
/// `Duration` has no finer part), or guardian's message for one above its maximum.
pub(crate) fn duration(opt: Opt, d: Duration) -> Result<OsString, String> {
    let ns =
        d.as_nanos().div_ceil(u128::from(driver::DURATION_RESOLUTION_NS)) * u128::from(driver::DURATION_RESOLUTION_NS);
    let text = format!("{ns}ns");
    if ns > u128::from(u64::MAX) {
        return Err(format!(
            "invalid value '{text}' for '--{} <{}>': duration '{text}' is too large: the maximum is {}s (about 584 \
             years; as nanoseconds it must fit in 64 bits)",
            opt.long(),
            opt.value_name().unwrap_or("DURATION"),
            driver::DURATION_MAX_SECONDS
        ));
    }
    Ok(text.into())
}

impl Builder {
    pub(crate) fn new(program: &OsStr) -> Builder {
        Builder {
            program: program.to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            stdin: None,
            stdout: None,
            stderr: None,
            guardian: None,
            options: Vec::new(),
            invalid: None,
            uid: None,
            gid: None,
            pgroup: None,
            kill_on_drop: false,
        }
    }

    pub(crate) fn set(&mut self, opt: Opt, value: Option<OsString>) {
        self.options.retain(|(o, _)| *o != opt);
        self.options.push((opt, value));
    }
    pub(crate) fn unset(&mut self, opt: Opt) {
        self.options.retain(|(o, _)| *o != opt);
    }
    pub(crate) fn switch(&mut self, opt: Opt, on: bool) {
        if on { self.set(opt, None) } else { self.unset(opt) }
    }
    pub(crate) fn set_duration(&mut self, opt: Opt, d: Duration) {
        match duration(opt, d) {
            Ok(text) => self.set(opt, Some(text)),
            Err(message) => self.invalid = Some(message),
        }
    }

    /// guardian's arguments before the events option: the options set, in [`OPTIONS`] order.
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

    /// The value `name` has in the environment the provider will get (this process's, edited).
    pub(crate) fn child_env(&self, name: &str) -> Option<OsString> {
        let mut value = std::env::var_os(name);
        for op in &self.env {
            match op {
                EnvOp::Set(k, v) if k == name => value = Some(v.clone()),
                EnvOp::Remove(k) if k == name => value = None,
                EnvOp::Clear => value = None,
                _ => {}
            }
        }
        value
    }

    /// The std command that starts `guardian` with these settings and `events` (the events
    /// option and its value), without stdio. guardian gets the kill request's variable
    /// (spec/driver.json) in its environment; it removes it from the provider's.
    pub(crate) fn std_command(&self, guardian: &Path, events: (Opt, &OsStr)) -> std::process::Command {
        use std::os::unix::process::CommandExt;
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
        cmd.env(driver::KILL_SIGNAL_VARIABLE, driver::KILL_SIGNAL);
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        if let Some(uid) = self.uid {
            cmd.uid(uid);
        }
        if let Some(gid) = self.gid {
            cmd.gid(gid);
        }
        if let Some(pgroup) = self.pgroup {
            cmd.process_group(pgroup);
        }
        cmd
    }
}

impl Builder {
    /// A host's `std::process::Command` (tokio's wraps one): program, args, environment
    /// changes, directory through std's getters; what std has no getter for (`env_clear`,
    /// `uid`, `gid`, `process_group`, and stdio set to piped, null or inherit) through its
    /// `{:#?}` form, whose shape `tests/tokio_parity.rs` checks. Stdio set to a file or fd
    /// cannot be carried over (std gives no way to take it back): set it on this `Command`.
    pub(crate) fn from_std(cmd: &std::process::Command) -> Builder {
        let mut b = Builder::new(cmd.get_program());
        let debug = format!("{cmd:#?}");
        let lines: Vec<&str> = debug.lines().collect();
        let field = |name: &str| -> Option<&str> {
            let at = lines.iter().position(|l| *l == format!("    {name}: Some("))?;
            lines.get(at + 1).map(|v| v.trim().trim_end_matches(','))
        };
        if lines.contains(&"        clear: true,") {
            b.env.push(EnvOp::Clear);
        }
        for (k, v) in cmd.get_envs() {
            b.env.push(match v {
                Some(v) => EnvOp::Set(k.to_owned(), v.to_owned()),
                None => EnvOp::Remove(k.to_owned()),
            });
        }
        b.args = cmd.get_args().map(OsStr::to_owned).collect();
        b.cwd = cmd.get_current_dir().map(Path::to_path_buf);
        b.uid = field("uid").and_then(|v| v.parse().ok());
        b.gid = field("gid").and_then(|v| v.parse().ok());
        b.pgroup = field("pgroup").and_then(|v| v.parse().ok());
        let stdio = |name: &str| -> Option<Stdio> {
            match field(name)? {
                "MakePipe" => Some(Stdio::piped()),
                "Null" => Some(Stdio::null()),
                "Inherit" => Some(Stdio::inherit()),
                _ => None,
            }
        };
        (b.stdin, b.stdout, b.stderr) = (stdio("stdin"), stdio("stdout"), stdio("stderr"));
        b
    }
}

impl From<std::process::Command> for Command {
    fn from(cmd: std::process::Command) -> Command {
        Command { b: Builder::from_std(&cmd) }
    }
}

/// The builder methods both public `Command`s share: std's (`arg`, `env`, `stdin`, ...,
/// `uid`, `gid`, `process_group`), tokio's `kill_on_drop`, and guardian's options. Each type
/// keeps its own `spawn`, `output` and `status` (blocking or async, as its model's).
macro_rules! builder_methods {
    () => {
        /// A provider command, like `std::process::Command::new`.
        pub fn new(program: impl AsRef<std::ffi::OsStr>) -> Self {
            Self { b: $crate::command::Builder::new(program.as_ref()) }
        }
        pub fn arg(&mut self, arg: impl AsRef<std::ffi::OsStr>) -> &mut Self {
            self.b.args.push(arg.as_ref().to_owned());
            self
        }
        pub fn args<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(&mut self, args: I) -> &mut Self {
            self.b.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
            self
        }
        pub fn env(&mut self, key: impl AsRef<std::ffi::OsStr>, val: impl AsRef<std::ffi::OsStr>) -> &mut Self {
            self.b.env.push($crate::command::EnvOp::Set(key.as_ref().to_owned(), val.as_ref().to_owned()));
            self
        }
        pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
        where
            I: IntoIterator<Item = (K, V)>,
            K: AsRef<std::ffi::OsStr>,
            V: AsRef<std::ffi::OsStr>,
        {
            for (k, v) in vars {
                self.env(k, v);
            }
            self
        }
        pub fn env_remove(&mut self, key: impl AsRef<std::ffi::OsStr>) -> &mut Self {
            self.b.env.push($crate::command::EnvOp::Remove(key.as_ref().to_owned()));
            self
        }
        /// Starts guardian (and so the provider) with only the variables set after this call.
        /// The guardian binary is still found through this process's `GUARDIAN_BIN` and `PATH`.
        pub fn env_clear(&mut self) -> &mut Self {
            self.b.env.push($crate::command::EnvOp::Clear);
            self
        }
        pub fn current_dir(&mut self, dir: impl AsRef<std::path::Path>) -> &mut Self {
            self.b.cwd = Some(dir.as_ref().to_owned());
            self
        }
        pub fn stdin(&mut self, cfg: impl Into<std::process::Stdio>) -> &mut Self {
            self.b.stdin = Some(cfg.into());
            self
        }
        pub fn stdout(&mut self, cfg: impl Into<std::process::Stdio>) -> &mut Self {
            self.b.stdout = Some(cfg.into());
            self
        }
        pub fn stderr(&mut self, cfg: impl Into<std::process::Stdio>) -> &mut Self {
            self.b.stderr = Some(cfg.into());
            self
        }
        /// guardian and the provider run as this user (`CommandExt::uid`).
        pub fn uid(&mut self, id: u32) -> &mut Self {
            self.b.uid = Some(id);
            self
        }
        /// guardian and the provider run with this group (`CommandExt::gid`).
        pub fn gid(&mut self, id: u32) -> &mut Self {
            self.b.gid = Some(id);
            self
        }
        /// guardian's process group (`CommandExt::process_group`): `0` makes it a group of its
        /// own, so a signal to that group (`killpg`) reaches guardian, which turns SIGTERM into a
        /// stop request. The provider always gets a group of its own (`spawned.pgid`).
        pub fn process_group(&mut self, pgroup: i32) -> &mut Self {
            self.b.pgroup = Some(pgroup);
            self
        }
        /// tokio's `kill_on_drop`: `true` makes a drop the kill request (SIGKILL to the provider
        /// and its tree at once) instead of the stop request with its grace. A child is never
        /// left running on drop either way.
        pub fn kill_on_drop(&mut self, kill_on_drop: bool) -> &mut Self {
            self.b.kill_on_drop = kill_on_drop;
            self
        }
        pub fn get_kill_on_drop(&self) -> bool {
            self.b.kill_on_drop
        }
        pub fn get_program(&self) -> &std::ffi::OsStr {
            &self.b.program
        }
        pub fn get_args(&self) -> impl ExactSizeIterator<Item = &std::ffi::OsStr> {
            self.b.args.iter().map(|a| a.as_os_str())
        }
        pub fn get_current_dir(&self) -> Option<&std::path::Path> {
            self.b.cwd.as_deref()
        }

        /// The guardian binary to run. Without it: `$GUARDIAN_BIN`, then `guardian` on `$PATH`
        /// (of this process).
        pub fn guardian(&mut self, path: impl AsRef<std::path::Path>) -> &mut Self {
            self.b.guardian = Some(path.as_ref().to_owned());
            self
        }
        /// `--grace`: time between the stop signal and SIGKILL (guardian's default: 1 s).
        pub fn grace(&mut self, grace: std::time::Duration) -> &mut Self {
            self.b.set_duration(treeguardian_spec::options::Opt::Grace, grace);
            self
        }
        /// `--stop-signal`: the signal the tree hears on a stop (`"TERM"`, `"INT"`, `"15"`).
        pub fn stop_signal(&mut self, signal: &str) -> &mut Self {
            self.b.set(treeguardian_spec::options::Opt::StopSignal, Some(signal.into()));
            self
        }
        /// `--forward-to group`: forwarded signals go to the provider's process group, not only
        /// the provider.
        pub fn forward_to_group(&mut self, on: bool) -> &mut Self {
            use treeguardian_spec::options::Opt;
            if on {
                self.b.set(Opt::ForwardTo, Some("group".into()))
            } else {
                self.b.unset(Opt::ForwardTo)
            }
            self
        }
        /// `--timeout`: then a bounded stop; guardian's status is 124.
        pub fn timeout(&mut self, timeout: std::time::Duration) -> &mut Self {
            self.b.set_duration(treeguardian_spec::options::Opt::Timeout, timeout);
            self
        }
        /// `--wait-descendants`: after the provider exits, let descendants finish.
        pub fn wait_descendants(&mut self, on: bool) -> &mut Self {
            self.b.switch(treeguardian_spec::options::Opt::WaitDescendants, on);
            self
        }
        /// `--no-parent-watch`: do not tear down when this process dies.
        pub fn no_parent_watch(&mut self, on: bool) -> &mut Self {
            self.b.switch(treeguardian_spec::options::Opt::NoParentWatch, on);
            self
        }
        /// `--cgroup`: `"auto"` or a delegated cgroup v2 directory to make the provider's leaf in.
        pub fn cgroup(&mut self, parent: impl AsRef<std::ffi::OsStr>) -> &mut Self {
            self.b.set(treeguardian_spec::options::Opt::Cgroup, Some(parent.as_ref().to_owned()));
            self
        }
        /// `--memory-max` of the leaf (`"512M"`, `"2G"`, bytes); needs `cgroup`.
        pub fn memory_max(&mut self, size: &str) -> &mut Self {
            self.b.set(treeguardian_spec::options::Opt::MemoryMax, Some(size.into()));
            self
        }
        /// `--pids-max` of the leaf; needs `cgroup`.
        pub fn pids_max(&mut self, n: u64) -> &mut Self {
            self.b.set(treeguardian_spec::options::Opt::PidsMax, Some(n.to_string().into()));
            self
        }
        /// `--cpu-max` of the leaf (`"0.5"`, `"2"`, `"QUOTA PERIOD"`); needs `cgroup`.
        pub fn cpu_max(&mut self, cpus: &str) -> &mut Self {
            self.b.set(treeguardian_spec::options::Opt::CpuMax, Some(cpus.into()));
            self
        }
    };
}
#[cfg(feature = "tokio")]
pub(crate) use builder_methods;

/// A provider to run under guardian: `std::process::Command`'s builder (program, args,
/// environment, working directory, stdio, uid, gid, process group) plus guardian's options.
/// The environment, directory and stdio are guardian's, which passes them on to the provider
/// unchanged (guardian removes its own `GUARDIAN_*` variables first).
#[derive(Debug)]
pub struct Command {
    pub(crate) b: Builder,
}

impl Command {
    builder_methods!();
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
        let args: Vec<String> = c.b.option_args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
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
        assert!(!c.b.option_args().iter().any(|a| a == "--wait-descendants" || a == "--forward-to"));
    }

    #[test]
    fn durations_are_exact_nanoseconds_up_to_guardians_maximum() {
        assert_eq!(duration(Opt::Grace, Duration::new(1, 1)).unwrap(), "1000000001ns");
        assert_eq!(
            duration(Opt::Grace, Duration::from_nanos(u64::MAX)).unwrap().to_str(),
            Some(format!("{}ns", u64::MAX).as_str())
        );
        let err = duration(Opt::Timeout, Duration::from_nanos(u64::MAX) + Duration::from_nanos(1)).unwrap_err();
        assert!(err.starts_with("invalid value '18446744073709551616ns' for '--timeout <DURATION>'"), "{err}");
    }
}
