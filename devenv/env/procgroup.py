"""POSIX sh that asks whether a process group still runs, for the scripts that end one on a host (L0: text).

`kill -0 -- -PGID` answers for zombies too: a member that ended at the TERM but is not reaped yet (its parent
has not waited for it; an orphan waits for init, which some inits, a container's or a sandbox's, do seconds
later) kept a stop waiting out its whole grace and then KILLing nothing. `group_alive PGID` is true only while
a member that is not a zombie is left (read from /proc; without /proc, what `kill -0` says)."""

from __future__ import annotations

GROUP_ALIVE = r'''
group_alive() {
  kill -0 "-$1" 2>/dev/null || return 1
  [ -r /proc/self/stat ] || return 0
  _ga_g=$1
  for _ga_f in /proc/[0-9]*/stat; do
    read -r _ga_l 2>/dev/null < "$_ga_f" || continue
    _ga_l=${_ga_l##*) }
    set -- $_ga_l
    [ "$3" = "$_ga_g" ] && [ "$1" != Z ] && [ "$1" != X ] && return 0
  done
  return 1
}
'''
