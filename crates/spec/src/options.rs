//! options: every command-line option of guardian and its subcommands, defined once. Each entry
//! of the table below holds an option's long and short names, its `GUARDIAN_*` variable, the
//! kind of value it takes, its value name, default, conflicts and help text. From it:
//! * the guardian binary's parser (`src/cli/parse.rs`) reads argv and the environment;
//! * the clap definition (`clap.rs`, feature `clap`) is built, which guardian's unit tests parse
//!   the same command lines and environments with and compare, and from which xtask renders the
//!   help texts (`man/help/`), the man page and the shell completions;
//! * xtask writes `spec/options.json`, which the Node, Python and Rust drivers are checked against.
//!
//! Adding an option is one entry here (and, in the binary, the `Cli` field it sets, in
//! `src/cli/mod.rs`'s `Cli::set`). The table is code, not data: each accessor is a `match` of
//! constants, so the binary holds no table of pointers that static-pie relocation would write
//! at every start (bench/profile.md, step 2).

mod json;
pub use json::to_json;

/// The kind of value an option takes: how guardian parses it, and what a driver may pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `0`, `500ms`, `10s`, `1.5s`, `1m`, `2h`, `250us`, `10ns`; a bare number is seconds.
    Duration,
    /// A signal name or number (`TERM`, `SIGINT`, `15`, `RTMIN+2`).
    Signal,
    /// One of these words, space-separated (`"provider group"`).
    Choice(&'static str),
    /// A file descriptor number, 0 to 2147483647.
    Fd,
    /// A path (any bytes but empty); `auto` where the value name says `auto|PATH`.
    Path,
    /// Bytes with an optional K, M, G or T suffix, or `max` (memory.max).
    Size,
    /// A positive count, or `max` (pids.max).
    Limit,
    /// A number of CPUs (`0.5`, `2`), or `QUOTA PERIOD` in microseconds, or `max` (cpu.max).
    Cpus,
    /// A flag without a value; its variable is true or false (also yes/no, on/off, 1/0).
    Flag,
    /// A flag that counts (`-vv`) up to this maximum; its variable is the count.
    Count(u8),
    /// `-h`, `--help`: print the help.
    Help,
    /// `-V`, `--version`: print the version.
    Version,
}

impl Kind {
    /// The kind's name in `spec/options.json`.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Duration => "duration",
            Kind::Signal => "signal",
            Kind::Choice(_) => "choice",
            Kind::Fd => "fd",
            Kind::Path => "path",
            Kind::Size => "size",
            Kind::Limit => "limit",
            Kind::Cpus => "cpus",
            Kind::Flag => "flag",
            Kind::Count(_) => "count",
            Kind::Help => "help",
            Kind::Version => "version",
        }
    }

    /// The option takes a value (`--grace 5s`); the others are flags.
    pub const fn takes_value(self) -> bool {
        !matches!(self, Kind::Flag | Kind::Count(_) | Kind::Help | Kind::Version)
    }
}

/// The commands: guardian itself and its subcommands. A bit set, so an option (`--help`) can
/// belong to several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commands(pub u8);

impl Commands {
    pub const MAIN: Commands = Commands(1);
    pub const SWEEP: Commands = Commands(2);
    pub const DOCTOR: Commands = Commands(4);
    pub const ALL: Commands = Commands(7);

    pub const fn has(self, c: Commands) -> bool {
        self.0 & c.0 != 0
    }
}

/// One option's definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// The commands that have the option.
    pub commands: Commands,
    /// `--long` without the dashes.
    pub long: &'static str,
    pub short: Option<char>,
    /// The variable read when the command line does not give the option.
    pub env: Option<&'static str>,
    pub kind: Kind,
    /// The value's name in the help (`--grace <DURATION>`); `None` for flags.
    pub value_name: Option<&'static str>,
    /// The value used when neither the command line nor the variable gives one.
    pub default: Option<&'static str>,
    /// Refused together with this option.
    pub conflicts: Option<Opt>,
    /// The help text: one sentence or a few, no final period.
    pub help: &'static str,
}

/// The fields an entry leaves out.
const BASE: Spec = Spec {
    commands: Commands::MAIN,
    long: "",
    short: None,
    env: None,
    kind: Kind::Flag,
    value_name: None,
    default: None,
    conflicts: None,
    help: "",
};

macro_rules! options {
    ($($id:ident { $($field:ident: $value:expr),* $(,)? })*) => {
        /// Every option of every command, in the order the help lists them (and the order the
        /// variables are read in).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Opt { $($id),* }

        impl Opt {
            /// Every option, in the table's order.
            pub const ALL: &'static [Opt] = &[$(Opt::$id),*];

            /// The option's whole definition.
            pub const fn spec(self) -> Spec {
                match self { $(Opt::$id => Spec { $($field: $value,)* ..BASE }),* }
            }

            // One accessor per field the binary reads, each a `match` of constants, so that the
            // binary carries neither the help texts nor a relocated table.
            pub const fn long(self) -> &'static str {
                match self { $(Opt::$id => const { Opt::$id.spec().long }),* }
            }
            pub const fn short(self) -> Option<char> {
                match self { $(Opt::$id => const { Opt::$id.spec().short }),* }
            }
            pub const fn env(self) -> Option<&'static str> {
                match self { $(Opt::$id => const { Opt::$id.spec().env }),* }
            }
            pub const fn kind(self) -> Kind {
                match self { $(Opt::$id => const { Opt::$id.spec().kind }),* }
            }
            pub const fn value_name(self) -> Option<&'static str> {
                match self { $(Opt::$id => const { Opt::$id.spec().value_name }),* }
            }
            pub const fn commands(self) -> Commands {
                match self { $(Opt::$id => const { Opt::$id.spec().commands }),* }
            }
            pub const fn conflicts(self) -> Option<Opt> {
                match self { $(Opt::$id => const { Opt::$id.spec().conflicts }),* }
            }
        }
    };
}

options! {
    Grace {
        long: "grace", short: Some('g'), env: Some("GUARDIAN_GRACE"), kind: Kind::Duration,
        value_name: Some("DURATION"), default: Some("1s"),
        help: "Time between the stop signal and SIGKILL (e.g. 0, 500ms, 10s, 1.5s, 1m; bare number = seconds)",
    }
    StopSignal {
        long: "stop-signal", short: Some('s'), env: Some("GUARDIAN_STOP_SIGNAL"), kind: Kind::Signal,
        value_name: Some("SIG"), default: Some("TERM"),
        help: "Signal sent to the tree to stop it (name or number: TERM, INT, HUP, 15, RTMIN+2); receiving \
               it is a stop request, like SIGTERM. Not KILL (use --grace 0), STOP, CONT, CHLD, TSTP, TTIN or TTOU",
    }
    KillSignal {
        long: "kill-signal", env: Some("GUARDIAN_KILL_SIGNAL"), kind: Kind::Signal, value_name: Some("SIG"),
        help: "Receiving this signal is a kill request: SIGKILL to COMMAND and its whole tree at once, no \
               stop signal, no grace; guardian ends as COMMAND did (killed by SIGKILL). No default; the drivers \
               use RTMAX. Not TERM or the stop signal, nor KILL, STOP, CONT, CHLD, TSTP, TTIN or TTOU",
    }
    ForwardTo {
        long: "forward-to", env: Some("GUARDIAN_FORWARD_TO"), kind: Kind::Choice("provider group"),
        value_name: Some("TARGET"), default: Some("provider"),
        help: "Where signals guardian receives are forwarded: provider (the provider process only, through \
               its pidfd) or group (the provider's process group, safe while the unreaped provider pins the pgid)",
    }
    EventsFd {
        long: "events-fd", env: Some("GUARDIAN_EVENTS_FD"), kind: Kind::Fd, value_name: Some("N"),
        help: "Write JSON Lines events to this inherited file descriptor (never passed on to COMMAND)",
    }
    EventsFile {
        long: "events-file", env: Some("GUARDIAN_EVENTS_FILE"), kind: Kind::Path, value_name: Some("PATH"),
        conflicts: Some(Opt::EventsFd),
        help: "Append JSON Lines events to this file (created 0600 if missing; a FIFO needs a reader \
               already), for callers that cannot pass a file descriptor",
    }
    Timeout {
        long: "timeout", short: Some('t'), env: Some("GUARDIAN_TIMEOUT"), kind: Kind::Duration,
        value_name: Some("DURATION"),
        help: "Stop the tree after this long and exit 124, as coreutils timeout; 0 means no timeout",
    }
    WaitDescendants {
        long: "wait-descendants", short: Some('w'), env: Some("GUARDIAN_WAIT_DESCENDANTS"),
        help: "After COMMAND exits, let its descendants finish on their own instead of stopping them \
               (parent death, --timeout and SIGTERM still stop them)",
    }
    NoParentWatch {
        long: "no-parent-watch", env: Some("GUARDIAN_NO_PARENT_WATCH"),
        help: "Do not tear the tree down when guardian's parent process dies",
    }
    NoSentinel {
        long: "no-sentinel", env: Some("GUARDIAN_NO_SENTINEL"),
        help: "Run as one process: no sentinel parent, so a SIGKILL of the process the host started \
               leaves the tree running (see the contract's sentinel section; doctor reports it)",
    }
    Cgroup {
        long: "cgroup", env: Some("GUARDIAN_CGROUP"), kind: Kind::Path, value_name: Some("auto|PATH"),
        help: "Start the provider in a fresh leaf cgroup: `auto` (guardian's own cgroup, if delegated to \
               this user; otherwise plain subreaper mode) or the path of a delegated cgroup v2 directory",
    }
    MemoryMax {
        long: "memory-max", env: Some("GUARDIAN_MEMORY_MAX"), kind: Kind::Size, value_name: Some("SIZE"),
        help: "Limit the leaf's memory (memory.max: bytes or 512M, 2G, max). Needs --cgroup and a delegated \
               memory controller; an OOM kill is reported in the `released` event",
    }
    PidsMax {
        long: "pids-max", env: Some("GUARDIAN_PIDS_MAX"), kind: Kind::Limit, value_name: Some("N"),
        help: "Limit the number of processes in the leaf (pids.max). Needs --cgroup and a delegated pids controller",
    }
    CpuMax {
        long: "cpu-max", env: Some("GUARDIAN_CPU_MAX"), kind: Kind::Cpus, value_name: Some("CPUS"),
        help: "Limit the leaf's CPU time (cpu.max): CPUs (0.5, 2) or \"QUOTA PERIOD\" in microseconds. \
               Needs --cgroup and a delegated cpu controller",
    }
    Verbose {
        long: "verbose", short: Some('v'), env: Some("GUARDIAN_VERBOSE"), kind: Kind::Count(3),
        conflicts: Some(Opt::Quiet),
        help: "Log what guardian does to stderr, prefixed \"guardian:\" (repeat for more, up to -vvv; \
               the variable gives the count, 0 to 3)",
    }
    Quiet {
        long: "quiet", short: Some('q'),
        help: "Print only fatal errors",
    }
    SweepCgroup {
        commands: Commands::SWEEP, long: "cgroup", env: Some("GUARDIAN_CGROUP"), kind: Kind::Path,
        value_name: Some("PATH"),
        help: "The delegated cgroup directory to sweep (default: guardian's own cgroup)",
    }
    Leaf {
        commands: Commands::SWEEP, long: "leaf", kind: Kind::Path, value_name: Some("LEAF"),
        conflicts: Some(Opt::SweepCgroup),
        help: "Only this leaf (the path the `spawned` event names): kill what is left in it (also a process \
               cgroup.kill misses) and remove it, unless its guardian lives (then exit 1)",
    }
    Json {
        commands: Commands::DOCTOR, long: "json",
        help: "Print a JSON object instead of text",
    }
    DoctorCgroup {
        commands: Commands::DOCTOR, long: "cgroup", kind: Kind::Path, value_name: Some("auto|PATH"),
        help: "The --cgroup setting to evaluate",
    }
    Help {
        commands: Commands::ALL, long: "help", short: Some('h'), kind: Kind::Help,
        help: "Print help",
    }
    Version {
        long: "version", short: Some('V'), kind: Kind::Version,
        help: "Print version",
    }
}

impl Opt {
    /// The options of one command, in the table's order.
    pub fn of(command: Commands) -> impl Iterator<Item = Opt> {
        Opt::ALL.iter().copied().filter(move |o| o.commands().has(command))
    }

    /// The option's position in [`Opt::ALL`] (below 32: a `u32` holds a set of options).
    pub const fn index(self) -> u32 {
        self as u32
    }
}

/// Every `GUARDIAN_*` variable, each once, in the table's order.
pub fn env_vars() -> impl Iterator<Item = &'static str> {
    Opt::ALL
        .iter()
        .enumerate()
        .filter_map(|(i, o)| o.env().filter(|name| !Opt::ALL[..i].iter().any(|p| p.env() == Some(name))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_consistent() {
        assert!(Opt::ALL.len() <= 32, "a u32 holds a set of options");
        for (i, &o) in Opt::ALL.iter().enumerate() {
            let s = o.spec();
            assert_eq!(o.index() as usize, i);
            assert!(!s.long.is_empty() && !s.help.is_empty() && !s.help.ends_with('.'), "{o:?}");
            assert_eq!(s.kind.takes_value(), s.value_name.is_some(), "{o:?}: a value name iff it takes a value");
            assert!(s.env.is_none_or(|e| e.starts_with("GUARDIAN_")), "{o:?}");
            // Within a command, names are unique, and at most one option counts (the parser
            // keeps one count per command).
            for c in [Commands::MAIN, Commands::SWEEP, Commands::DOCTOR] {
                if !s.commands.has(c) {
                    continue;
                }
                assert!(Opt::of(c).filter(|p| matches!(p.kind(), Kind::Count(_))).count() <= 1, "{c:?}");
                for p in Opt::of(c).filter(|&p| p != o) {
                    assert_ne!(p.long(), s.long, "{o:?} and {p:?}");
                    assert!(s.short.is_none() || p.short() != s.short, "{o:?} and {p:?}");
                }
            }
            // The accessors are the definition's fields.
            assert_eq!(
                (o.long(), o.short(), o.env(), o.kind(), o.value_name(), o.commands(), o.conflicts()),
                (s.long, s.short, s.env, s.kind, s.value_name, s.commands, s.conflicts)
            );
        }
    }

    /// docs/contract.md's option table names every option of guardian and its variable, and
    /// the README's names every option (the help, man page and completions are generated).
    #[test]
    fn the_docs_name_every_option() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let (contract, readme) = (read("docs/contract.md"), read("README.md"));
        let rows =
            |text: &str| -> Vec<String> { text.lines().filter(|l| l.starts_with("| `-")).map(String::from).collect() };
        let (contract, readme) = (rows(&contract), rows(&readme));
        for o in Opt::of(Commands::MAIN).filter(|o| !matches!(o.kind(), Kind::Help | Kind::Version)) {
            let long = format!("--{}", o.long());
            let row = contract.iter().find(|r| r.contains(&format!("`{long}")) || r.contains(&format!(" {long}")));
            let row = row.unwrap_or_else(|| panic!("docs/contract.md's option table lacks {long}"));
            if let Some(env) = o.env() {
                assert!(row.contains(env), "docs/contract.md: the row of {long} lacks {env}: {row}");
            }
            assert!(readme.iter().any(|r| r.contains(&long)), "README.md's option table lacks {long}");
        }
    }

    #[test]
    fn each_variable_is_listed_once() {
        let vars: Vec<_> = env_vars().collect();
        let mut unique = vars.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(vars.len(), unique.len(), "{vars:?}");
        assert!(vars.contains(&"GUARDIAN_CGROUP") && vars.contains(&"GUARDIAN_VERBOSE"));
    }
}
