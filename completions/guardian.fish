# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_guardian_global_optspecs
    string join \n g/grace= s/stop-signal= kill-signal= forward-to= events-fd= events-file= t/timeout= w/wait-descendants no-parent-watch no-sentinel cgroup= memory-max= pids-max= cpu-max= v/verbose q/quiet V/version h/help
end

function __fish_guardian_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_guardian_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_guardian_using_subcommand
    set -l cmd (__fish_guardian_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c guardian -n "__fish_guardian_needs_command" -s g -l grace -d 'Time between the stop signal and SIGKILL (e.g. 0, 500ms, 10s, 1.5s, 1m; bare number = seconds)' -r
complete -c guardian -n "__fish_guardian_needs_command" -s s -l stop-signal -d 'Signal sent to the tree to stop it (name or number: TERM, INT, HUP, 15, RTMIN+2); receiving it is a stop request, like SIGTERM. Not KILL (use --grace 0), STOP, CONT, CHLD, TSTP, TTIN or TTOU' -r
complete -c guardian -n "__fish_guardian_needs_command" -l kill-signal -d 'Receiving this signal is a kill request: SIGKILL to COMMAND and its whole tree at once, no stop signal, no grace; guardian ends as COMMAND did (killed by SIGKILL). No default; the drivers use RTMAX. Not TERM or the stop signal, nor KILL, STOP, CONT, CHLD, TSTP, TTIN or TTOU' -r
complete -c guardian -n "__fish_guardian_needs_command" -l forward-to -d 'Where signals guardian receives are forwarded: provider (the provider process only, through its pidfd) or group (the provider\'s process group, safe while the unreaped provider pins the pgid)' -r -f -a "provider\t''
group\t''"
complete -c guardian -n "__fish_guardian_needs_command" -l events-fd -d 'Write JSON Lines events to this inherited file descriptor (never passed on to COMMAND)' -r
complete -c guardian -n "__fish_guardian_needs_command" -l events-file -d 'Append JSON Lines events to this file (created 0600 if missing; a FIFO needs a reader already), for callers that cannot pass a file descriptor' -r
complete -c guardian -n "__fish_guardian_needs_command" -s t -l timeout -d 'Stop the tree after this long and exit 124, as coreutils timeout; 0 means no timeout' -r
complete -c guardian -n "__fish_guardian_needs_command" -l cgroup -d 'Start the provider in a fresh leaf cgroup: `auto` (guardian\'s own cgroup, if delegated to this user; otherwise plain subreaper mode) or the path of a delegated cgroup v2 directory' -r
complete -c guardian -n "__fish_guardian_needs_command" -l memory-max -d 'Limit the leaf\'s memory (memory.max: bytes or 512M, 2G, max). Needs --cgroup and a delegated memory controller; an OOM kill is reported in the `released` event' -r
complete -c guardian -n "__fish_guardian_needs_command" -l pids-max -d 'Limit the number of processes in the leaf (pids.max). Needs --cgroup and a delegated pids controller' -r
complete -c guardian -n "__fish_guardian_needs_command" -l cpu-max -d 'Limit the leaf\'s CPU time (cpu.max): CPUs (0.5, 2) or "QUOTA PERIOD" in microseconds. Needs --cgroup and a delegated cpu controller' -r
complete -c guardian -n "__fish_guardian_needs_command" -s w -l wait-descendants -d 'After COMMAND exits, let its descendants finish on their own instead of stopping them (parent death, --timeout and SIGTERM still stop them)'
complete -c guardian -n "__fish_guardian_needs_command" -l no-parent-watch -d 'Do not tear the tree down when guardian\'s parent process dies'
complete -c guardian -n "__fish_guardian_needs_command" -l no-sentinel -d 'Run as one process: no sentinel parent, so a SIGKILL of the process the host started leaves the tree running (see the contract\'s sentinel section; doctor reports it)'
complete -c guardian -n "__fish_guardian_needs_command" -s v -l verbose -d 'Log what guardian does to stderr, prefixed "guardian:" (repeat for more, up to -vvv; the variable gives the count, 0 to 3)'
complete -c guardian -n "__fish_guardian_needs_command" -s q -l quiet -d 'Print only fatal errors'
complete -c guardian -n "__fish_guardian_needs_command" -s V -l version -d 'Print version'
complete -c guardian -n "__fish_guardian_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c guardian -n "__fish_guardian_needs_command" -a "sweep" -d 'Find leaf cgroups whose guardian has died, kill their processes and remove them'
complete -c guardian -n "__fish_guardian_needs_command" -a "doctor" -d 'Check which of guardian\'s guarantees hold on this machine, and in which mode it would run'
complete -c guardian -n "__fish_guardian_using_subcommand sweep" -l cgroup -d 'The delegated cgroup directory to sweep (default: guardian\'s own cgroup)' -r
complete -c guardian -n "__fish_guardian_using_subcommand sweep" -l leaf -d 'Only this leaf (the path the `spawned` event names): kill what is left in it (also a process cgroup.kill misses) and remove it, unless its guardian lives (then exit 1)' -r
complete -c guardian -n "__fish_guardian_using_subcommand sweep" -s h -l help -d 'Print help'
complete -c guardian -n "__fish_guardian_using_subcommand doctor" -l cgroup -d 'The --cgroup setting to evaluate' -r
complete -c guardian -n "__fish_guardian_using_subcommand doctor" -l json -d 'Print a JSON object instead of text'
complete -c guardian -n "__fish_guardian_using_subcommand doctor" -s h -l help -d 'Print help'
