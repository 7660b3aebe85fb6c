//! cli::fields: the one place that binds each option of the table (`treeguardian_spec::options`)
//! to its field of [`Cli`]: the field's name and type, and how the option's parsed value becomes
//! it, one row per [`Opt`] (as ripgrep keeps each flag's update beside the flag). The default is
//! the table's own (`Spec::default`), held in the row as a constant so that no start parses it;
//! a unit test checks each constant against the table's text, parsed as any value is. Adding an
//! option is its entry in the table plus one row below. The parser fills a [`Given`] as it meets
//! values; [`Given::finish`] makes the [`Cli`].

use std::ffi::OsString;
use std::time::Duration;

use treeguardian_spec::options::Opt;

use super::Sub;
use super::values::Value;
use crate::signals::StopSignal;
use crate::signals::Target;

macro_rules! fields {
    (
        with_default { $($d_opt:ident => $d_field:ident: $d_ty:ty = |$d_val:pat_param| $d_conv:expr, default $d_def:expr;)* }
        without { $($o_opt:ident => $o_field:ident: $o_ty:ty = |$o_val:pat_param| $o_conv:expr;)* }
    ) => {
        /// guardian's settings: one field per option of the table.
        #[derive(Debug, PartialEq)]
        pub struct Cli {
            pub sub: Option<Sub>,
            $(pub $d_field: $d_ty,)*
            $(pub $o_field: $o_ty,)*
            pub command: Vec<OsString>,
        }

        /// The values given so far (on the command line or by a variable); what was not given
        /// takes the table's default at [`Given::finish`].
        #[derive(Debug, Default)]
        pub struct Given {
            pub sub: Option<Sub>,
            $($d_field: Option<$d_ty>,)*
            $($o_field: Option<$o_ty>,)*
        }

        impl Given {
            /// Stores an option's value. The parser has checked that the value is of the
            /// option's kind.
            pub fn set(&mut self, o: Opt, v: Value) {
                match (o, v) {
                    $((Opt::$d_opt, $d_val) => self.$d_field = Some($d_conv),)*
                    $((Opt::$o_opt, $o_val) => self.$o_field = Some($o_conv),)*
                    (o, v) => self.set_sub(o, v),
                }
            }

            /// The settings: what was given, else the table's default (an option without one
            /// is `None`, false or 0).
            pub fn finish(self, command: Vec<OsString>) -> Cli {
                Cli {
                    sub: self.sub,
                    $($d_field: match self.$d_field {
                        Some(given) => given,
                        None => defaults::$d_field,
                    },)*
                    $($o_field: self.$o_field.unwrap_or_default(),)*
                    command,
                }
            }
        }

        /// The table's defaults as constants, so a start parses none of them (parsing the
        /// table's text cost ~3,000 instructions per start). The unit test
        /// `defaults_and_choices_come_from_the_table` checks each against the table's text,
        /// parsed as a given value is: the table stays the one source.
        #[allow(non_upper_case_globals)]
        mod defaults {
            use super::*;
            $(pub const $d_field: $d_ty = $d_def;)*
        }

        /// The options whose row gives a default, for the tests.
        #[cfg(test)]
        pub const DEFAULTED: &[Opt] = &[$(Opt::$d_opt,)*];
    };
}

fields! {
    with_default {
        Grace => grace: Duration = |Value::Duration(d)| d, default Duration::from_secs(1);
        StopSignal => stop_signal: StopSignal = |Value::Signal(s)| s, default StopSignal::TERM;
        ForwardTo => forward_to: Target = |Value::Choice(Choice::Target(t))| t, default Target::Provider;
    }
    without {
        EventsFd => events_fd: Option<i32> = |Value::Fd(n)| Some(n);
        EventsFile => events_file: Option<OsString> = |Value::Path(p)| Some(p);
        // 0 is no timeout, as with coreutils timeout.
        Timeout => timeout: Option<Duration> = |Value::Duration(d)| Some(d).filter(|d| !d.is_zero());
        WaitDescendants => wait_descendants: bool = |Value::Flag(b)| b;
        NoParentWatch => no_parent_watch: bool = |Value::Flag(b)| b;
        NoSentinel => no_sentinel: bool = |Value::Flag(b)| b;
        Cgroup => cgroup: Option<OsString> = |Value::Path(p)| Some(p);
        MemoryMax => memory_max: Option<String> = |Value::Text(t)| Some(t);
        PidsMax => pids_max: Option<String> = |Value::Text(t)| Some(t);
        CpuMax => cpu_max: Option<String> = |Value::Text(t)| Some(t);
        Verbose => verbose: u8 = |Value::Count(n)| n;
        Quiet => quiet: bool = |Value::Flag(b)| b;
        // The kill request: checked against the stop signal by `signals::check_kill_signal`.
        KillSignal => kill_signal: Option<i32> = |Value::Signal(s)| Some(s.get());
    }
}

/// A choice's word, as the type of the field it sets. A `Kind::Choice` in the table names its
/// words; [`Choice::parse`] is where each becomes its variant (the unit tests check that every
/// word of the table parses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// `--forward-to`: where forwarded signals go, as the supervisor takes it.
    Target(Target),
}

impl Choice {
    /// The word `word` of option `o`'s choice.
    pub fn parse(o: Opt, word: &str) -> Option<Choice> {
        match (o, word) {
            (Opt::ForwardTo, "provider") => Some(Choice::Target(Target::Provider)),
            (Opt::ForwardTo, "group") => Some(Choice::Target(Target::Group)),
            _ => None,
        }
    }
}

impl Given {
    /// The subcommands' options, which set a field of their [`Sub`].
    fn set_sub(&mut self, o: Opt, v: Value) {
        match (o, v, &mut self.sub) {
            (
                Opt::SweepCgroup | Opt::DoctorCgroup,
                Value::Path(p),
                Some(Sub::Sweep { cgroup, .. } | Sub::Doctor { cgroup, .. }),
            ) => *cgroup = Some(p),
            (Opt::Leaf, Value::Path(p), Some(Sub::Sweep { leaf, .. })) => *leaf = Some(p),
            (Opt::Json, Value::Flag(b), Some(Sub::Doctor { json, .. })) => *json = b,
            // Help and version are printed, never stored; a value of another kind cannot come
            // from the parser (values.rs makes the kind's value).
            _ => {}
        }
    }
}

/// The rows' own tests, beside them.
#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use treeguardian_spec::options::{Commands, Kind, Opt};

    use super::{Choice, DEFAULTED, Given, Sub, Target};
    use crate::cli::values::parse_value;

    /// `fields.rs` gives every option of the table a field: a value of the option's kind changes
    /// what the parser returns (a missing row would be lost by both parsers alike).
    #[test]
    fn every_option_reaches_its_field() {
        for &o in Opt::ALL {
            let value: &[u8] = match o.kind() {
                Kind::Help | Kind::Version => continue,
                Kind::Duration => b"7s",
                Kind::Signal => b"HUP",
                Kind::Choice(words) => words.rsplit(' ').next().unwrap_or_default().as_bytes(),
                Kind::Fd => b"9",
                Kind::Path => b"/p",
                Kind::Size => b"1M",
                Kind::Limit => b"9",
                Kind::Cpus => b"2",
                Kind::Flag => b"true",
                Kind::Count(_) => b"2",
            };
            let value = parse_value(o, OsStr::from_bytes(value)).unwrap();
            let sub = match o {
                _ if o.commands().has(Commands::SWEEP) => Some(Sub::Sweep { cgroup: None, leaf: None }),
                _ if o.commands().has(Commands::DOCTOR) => Some(Sub::Doctor { json: false, cgroup: None }),
                _ => None,
            };
            let given = || Given { sub: sub.clone(), ..Given::default() };
            let before = given().finish(Vec::new());
            let mut cli = given();
            cli.set(o, value);
            assert_ne!(cli.finish(Vec::new()), before, "{o:?}: fields.rs has no row for it");
        }
    }

    /// Each compile-time default is the table's, parsed as a given value is (a row's constant
    /// that differs from the table's text fails here), every default of the table has its
    /// constant and no row has a default the table lacks; and each word of a choice parses into
    /// its field's type.
    #[test]
    fn defaults_and_choices_come_from_the_table() {
        let cli = Given::default().finish(Vec::new());
        for &o in Opt::ALL {
            if let Some(text) = o.spec().default {
                let mut given = Given::default();
                given.set(o, parse_value(o, OsStr::new(text)).expect("every default of the table parses"));
                assert_eq!(given.finish(Vec::new()), cli, "{o:?}: the default is the table's {text}");
                assert!(DEFAULTED.contains(&o), "{o:?} has a default in the table but none in its row");
            } else {
                assert!(!DEFAULTED.contains(&o), "{o:?} has a default in its row but none in the table");
            }
            if let Kind::Choice(words) = o.kind() {
                for w in words.split(' ') {
                    assert!(Choice::parse(o, w).is_some(), "{o:?}: the word {w} has no variant");
                }
            }
        }
        assert_eq!(Choice::parse(Opt::ForwardTo, "group"), Some(Choice::Target(Target::Group)));
    }
}
