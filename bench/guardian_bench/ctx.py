"""The run's configuration (`Cfg`) and state (`Ctx`); every field is declared in one place."""

import dataclasses

from .common import warn
from .procs import Procs


@dataclasses.dataclass
class Cfg:
    """What to measure and how much: parsed from the command line (`cli.parse_args`), or read
    back from a raw.json for --report-only."""
    argv: list
    smoke: bool
    rounds: int
    sizes: list
    chain_max: int
    idle: float
    load: int
    startup_runs: int
    startup_warmup: int
    mem_count: int
    release_reps: int
    driver_tree: int
    driver_timeout: float
    only: list
    wrappers: list


class Ctx:
    """One run's state: the measured wrappers, the results, and what the report needs to say
    about the host. Every field is declared here."""

    def __init__(self, run, tmp, cfg):
        self.run = run
        self.tmp = tmp
        self.cfg = cfg
        # set-up commands (gcc, apt-get, cargo) carry this nonce, so the final cleanup finds them
        self.setup_tag = f"{run}-00000-setup"
        self.procs = Procs(run)
        self.res = {}
        self.notes = []
        self.skips = []
        self.host_notes = []
        self.derived_notes = []
        self.highlights = []
        self.missing = []
        self.cgroup_dirs = []
        self.guardian = None
        self.guardian_reason = None
        self.cgroup = None
        self.tree = None
        self.info = {}
        self.hyperfine = None
        self.hyperfine_version = ""
        self.wrappers = []
        self.rounds_done = 0
        self.elapsed = 0.0

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)
            warn(text)

    def skip(self, text):
        if text not in self.skips:
            self.skips.append(text)
