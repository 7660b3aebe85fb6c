_guardian() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="guardian"
                ;;
            guardian,doctor)
                cmd="guardian__subcmd__doctor"
                ;;
            guardian,sweep)
                cmd="guardian__subcmd__sweep"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        guardian)
            opts="-g -s -t -w -v -q -V -h --grace --stop-signal --kill-signal --forward-to --events-fd --events-file --timeout --wait-descendants --no-parent-watch --no-sentinel --cgroup --memory-max --pids-max --cpu-max --verbose --quiet --version --help sweep doctor"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --grace)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -g)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --stop-signal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --kill-signal)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --forward-to)
                    COMPREPLY=($(compgen -W "provider group" -- "${cur}"))
                    return 0
                    ;;
                --events-fd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --events-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --timeout)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -t)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cgroup)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --memory-max)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pids-max)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cpu-max)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        guardian__subcmd__doctor)
            opts="-h --json --cgroup --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --cgroup)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        guardian__subcmd__sweep)
            opts="-h --cgroup --leaf --help"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --cgroup)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --leaf)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _guardian -o nosort -o bashdefault -o default guardian
else
    complete -F _guardian -o bashdefault -o default guardian
fi
