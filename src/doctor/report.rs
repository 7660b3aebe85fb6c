//! Rendering doctor's findings: one [`Report`], printed as text or as one JSON object (the
//! shape docs/contract.md's users parse: `checks`, `cgroup`, `proc`, `degraded`, `notes`).

use std::ffi::OsStr;

use serde_json::{Map, Value, json};

use super::probes::Probe;
use super::{Facts, Problem};

/// Everything doctor prints: the facts it gathered and its verdict on them.
pub(super) struct Report<'a> {
    /// The `--cgroup` value, if any.
    pub request: Option<&'a OsStr>,
    pub facts: Facts,
    /// The mode guardian would run in; `None` when it would refuse to start.
    pub mode: Option<&'static str>,
    /// Reasons guardian would run degraded (doctor exits 1) or refuse to start (2).
    pub problems: Vec<Problem>,
    /// What differs from the preferred path without weakening a guarantee.
    pub notes: Vec<String>,
}

impl Report<'_> {
    /// Whether guardian would run degraded (or refuse to start).
    pub fn degraded(&self) -> bool {
        !self.problems.is_empty()
    }

    /// doctor's exit status: 2 when guardian would refuse to start (there is no mode), 1 when
    /// it would run degraded, 0 when every guarantee holds.
    pub fn status(&self) -> i32 {
        match (self.mode, self.degraded()) {
            (None, _) => 2,
            (Some(_), true) => 1,
            (Some(_), false) => 0,
        }
    }

    /// Every probe, by its JSON key, in report order.
    fn checks(&self) -> Vec<(&'static str, &Probe)> {
        let f = &self.facts;
        vec![
            ("subreaper", &f.subreaper),
            ("signalfd", &f.signalfd),
            ("clone3_pidfd", &f.child.clone3_pidfd),
            ("pidfd_open", &f.child.pidfd_open),
            ("pidfd_send_signal", &f.child.pidfd_send_signal),
            ("waitid_pidfd", &f.child.waitid_pidfd),
            ("clone_into_cgroup", &f.cgroup.clone_into_cgroup),
            ("cgroup_kill", &f.cgroup.kill_file),
            ("cgroup_delegated", &f.cgroup.own_usable),
            ("proc_children_file", &f.child.children_file),
            ("pidfd_get_info", &f.child.pidfd_get_info),
            ("pidfd_fdinfo", &f.child.pidfd_fdinfo),
            ("parent_watch", &f.parent_watch),
            ("clone_vm", &f.clone_vm),
            ("cgroup_namespace", &f.cgroup.namespace_probe),
        ]
    }

    pub fn json(&self) -> Value {
        let f = &self.facts;
        let (cg, procf) = (&f.cgroup, &f.proc);
        let mut checks = Map::new();
        for (k, p) in self.checks() {
            checks.insert(k.to_string(), p.json());
        }
        json!({
            "guardian_version": env!("CARGO_PKG_VERSION"),
            "kernel": f.kernel,
            "pid": f.me,
            "euid": f.euid,
            "cgroup_request": self.request.map(|r| r.to_string_lossy().into_owned()),
            "mode": self.mode,
            "checks": checks,
            "cgroup": {
                "mount": cg.mount.as_ref().map(|m| m.mount_point.to_string_lossy().into_owned()),
                "mount_root": cg.mount.as_ref().map(|m| m.root.clone()),
                "own": cg.own_rel,
                "own_dir": cg.own_dir.as_ref().map(|d| d.to_string_lossy().into_owned()),
                "delegated": cg.own_usable.holds(),
                "nsdelegate": cg.nsdelegate,
                "namespace": cg.namespace,
                // Whom the kernel stops from moving out of the leaf: with nsdelegate and the
                // provider's own cgroup namespace, every process without CAP_SYS_ADMIN (one
                // that keeps it can setns out first); otherwise nobody.
                "move_out_refused": if cg.nsdelegate == Some(true) && cg.namespace { "without-cap-sys-admin" } else { "never" },
                "controllers": cg.controllers,
                "auto_usable": cg.own_usable.holds(),
                "path_usable": cg.path_usable.as_ref().map(Probe::holds),
            },
            "proc": {
                "own_namespace": procf.own_namespace,
                "error": procf.error,
                "hidepid": procf.hidepid,
                "subset": procf.subset,
                "children_file": f.child.children_file.holds(),
            },
            "degraded": self.problems.iter().map(|p| json!({"what": p.what, "problem": p.problem, "fix": p.fix})).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }

    /// The text report, one line per fact, then the notes and the problems with their fixes.
    pub fn human(&self) -> String {
        let f = &self.facts;
        let (cg, procf) = (&f.cgroup, &f.proc);
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!("guardian {} doctor", env!("CARGO_PKG_VERSION")));
        line(format!("kernel              {}", f.kernel));
        for (name, p) in [
            ("subreaper", &f.subreaper),
            ("signalfd", &f.signalfd),
            ("clone3 CLONE_PIDFD", &f.child.clone3_pidfd),
            ("pidfd_open", &f.child.pidfd_open),
            ("pidfd_send_signal", &f.child.pidfd_send_signal),
            ("waitid P_PIDFD", &f.child.waitid_pidfd),
            ("PIDFD_GET_INFO", &f.child.pidfd_get_info),
            ("pidfd fdinfo", &f.child.pidfd_fdinfo),
            ("parent watch", &f.parent_watch),
            ("clone CLONE_VM", &f.clone_vm),
        ] {
            line(format!("{name:<19} {} {}", mark(p), p.detail));
        }
        let show = |o: &Option<String>| o.clone().unwrap_or_else(|| "none".into());
        line(format!(
            "cgroup2 mount       {}",
            cg.mount.as_ref().map(|m| m.mount_point.display().to_string()).unwrap_or_else(|| "none".into())
        ));
        line(format!(
            "own cgroup          {} ({})",
            show(&cg.own_rel),
            cg.own_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_else(|| "not reachable".into())
        ));
        line(format!("delegated           {} {}", mark(&cg.own_usable), cg.own_usable.detail));
        line(format!(
            "nsdelegate          {}; cgroup namespace for the provider: {}",
            match cg.nsdelegate {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            },
            match (cg.namespace, cg.namespace_probe.ok) {
                (true, _) => "yes (CAP_SYS_ADMIN)",
                (false, Some(false)) => "no (see cgroup namespace)",
                (false, _) => "no (needs CAP_SYS_ADMIN)",
            }
        ));
        line(format!(
            "controllers         {}",
            cg.controllers
                .as_ref()
                .map(|c| if c.is_empty() { "none".into() } else { c.join(" ") })
                .unwrap_or_else(|| "unknown".into())
        ));
        line(format!("CLONE_INTO_CGROUP   {} {}", mark(&cg.clone_into_cgroup), cg.clone_into_cgroup.detail));
        line(format!("cgroup.kill         {} {}", mark(&cg.kill_file), cg.kill_file.detail));
        line(format!("cgroup namespace    {} {}", mark(&cg.namespace_probe), cg.namespace_probe.detail));
        line(format!(
            "/proc               {}, hidepid={}",
            match (&procf.error, procf.own_namespace) {
                (Some(e), _) => format!("unreadable: {e}"),
                (None, true) => "this PID namespace's".into(),
                (None, false) => "missing or another namespace's".into(),
            },
            procf.hidepid.as_deref().unwrap_or("off")
        ));
        line(format!("children file       {} {}", mark(&f.child.children_file), f.child.children_file.detail));
        let req = self.request.map(|r| r.to_string_lossy().into_owned()).unwrap_or_else(|| "not given".into());
        line(format!("mode                {} (--cgroup {req})", self.mode.unwrap_or("none: guardian would not start")));
        for n in &self.notes {
            line(format!("note: {n}"));
        }
        if self.problems.is_empty() {
            line("every guarantee holds in this mode".into());
        } else {
            line(format!("degraded: {} problem(s)", self.problems.len()));
            for p in &self.problems {
                line(format!("problem ({}): {}", p.what, p.problem));
                line(format!("  fix: {}", p.fix));
            }
        }
        out
    }
}

fn mark(p: &Probe) -> &'static str {
    match p.ok {
        Some(true) => "ok  ",
        Some(false) => "FAIL",
        None => "--  ",
    }
}
