"""Stand-in for an interactive program, driven by tests/job_control.rs through a pty.

usage: python3 job_control_program.py MODE NONCE [--child] [--late FIFO]

Every mode first prints "JC-READY pid=P pgid=G fg=F" (F is 1 when the program's process group
holds the terminal foreground, tcgetpgrp(0) == getpgrp(), 0 when it does not), and prints
"JC-CONT fg=F" on every SIGCONT. Lines end in CR LF so they read the same in raw mode.

modes:
  cooked  a line-oriented program: reads lines from the terminal and answers each with
          "JC-GOT <line> fg=F"; the line "q" exits 0. ^Z and ^C reach it as signals from the
          terminal (default dispositions: ^C kills it with SIGINT).
  raw     a full-screen program (vim, less): raw mode, so ^Z arrives as a byte; on it the
          program restores the terminal, prints JC-SUSPEND and stops its own process group
          with kill(0, SIGTSTP); once continued it re-enters raw mode and prints
          "JC-RESUMED fg=F". Any other key prints "JC-KEY <hex> fg=F"; "q" exits 0.
  exit    prints JC-READY and exits 0.
  hold    prints JC-READY and waits for signals without touching the terminal.
  devtty  uses the terminal through /dev/tty whatever fd 0 is (a pipe): reads a line from
          /dev/tty and answers "JC-GOT <line> fg=F", then sets fd 1's attributes
          (tcsetattr, which stops a background group with SIGTTOU) and prints "JC-SET fg=F",
          then exits 0; with --set-first it sets the attributes before reading. F here is
          tcgetpgrp(/dev/tty) == getpgrp().

--child starts a descendant first (`sleep 1000.NONCE`), so a test can check the whole tree.
--late FIFO waits for a line on FIFO after JC-READY, before the mode touches the terminal.
The NONCE argument only tags the process for the test's /proc scans.
"""

import os
import signal
import subprocess
import sys
import termios


def fg():
    try:
        return 1 if os.tcgetpgrp(0) == os.getpgrp() else 0
    except OSError:
        return -1


def say(text):
    os.write(1, (text + "\r\n").encode())


def on_cont(_sig, _frame):
    say("JC-CONT fg=%d" % fg())


def raw_on(saved):
    t = termios.tcgetattr(0)
    t[0] &= ~(termios.IXON | termios.ICRNL | termios.BRKINT | termios.INPCK | termios.ISTRIP)
    t[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
    t[6][termios.VMIN] = 1
    t[6][termios.VTIME] = 0
    termios.tcsetattr(0, termios.TCSANOW, t)
    return saved


def cooked():
    pending = b""
    while True:
        chunk = os.read(0, 1024)
        if not chunk:
            sys.exit(3)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            line = line.decode(errors="replace").strip()
            if line == "q":
                sys.exit(0)
            say("JC-GOT %s fg=%d" % (line, fg()))


def raw():
    saved = termios.tcgetattr(0)
    raw_on(saved)
    try:
        say("JC-RAW")
        while True:
            key = os.read(0, 1)
            if not key:
                sys.exit(3)
            if key == b"\x1a":
                termios.tcsetattr(0, termios.TCSANOW, saved)
                say("JC-SUSPEND")
                os.kill(0, signal.SIGTSTP)
                # Continued: take the terminal back into raw mode, as vim does.
                raw_on(saved)
                say("JC-RESUMED fg=%d" % fg())
            elif key == b"q":
                sys.exit(0)
            else:
                say("JC-KEY %s fg=%d" % (key.hex(), fg()))
    finally:
        termios.tcsetattr(0, termios.TCSANOW, saved)


def devtty(set_first):
    tty = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)

    def tty_fg():
        return 1 if os.tcgetpgrp(tty) == os.getpgrp() else 0

    def set_attributes():
        termios.tcsetattr(1, termios.TCSANOW, termios.tcgetattr(1))
        say("JC-SET fg=%d" % tty_fg())

    if set_first:
        set_attributes()
    line = os.read(tty, 1024).decode(errors="replace").strip()
    say("JC-GOT %s fg=%d" % (line, tty_fg()))
    if not set_first:
        set_attributes()
    sys.exit(0)


def main():
    mode, nonce = sys.argv[1], sys.argv[2]
    # Default dispositions, as a C program has them (python turns SIGINT into an exception).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGCONT, on_cont)
    if "--child" in sys.argv[3:]:
        subprocess.Popen(["sleep", "1000.%s" % nonce], stdin=subprocess.DEVNULL)
    say("JC-READY pid=%d pgid=%d fg=%d" % (os.getpid(), os.getpgrp(), fg()))
    if "--late" in sys.argv[3:]:
        with open(sys.argv[sys.argv.index("--late") + 1], "rb") as fifo:
            fifo.readline()
    if mode == "cooked":
        cooked()
    elif mode == "raw":
        raw()
    elif mode == "exit":
        sys.exit(0)
    elif mode == "devtty":
        # A plain program: no SIGCONT handler, so a stopped tcsetattr or read restarts.
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        devtty("--set-first" in sys.argv[3:])
    elif mode == "hold":
        while True:
            signal.pause()
    else:
        sys.exit("unknown mode %r" % mode)


main()
