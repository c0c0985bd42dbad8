#!/usr/bin/env bash
# A real Slurm cluster on this host, for tests and for trying the sbatch scripts: one slurmctld and
# NODES slurmd daemons (n1, n2, ...), each its own node with its own loopback address (127.0.0.2,
# 127.0.0.3, ...), and a munged of its own. Needs root.
#
#   scripts/slurm/local_cluster.sh start [DIR]   # then: export SLURM_CONF=DIR/slurm.conf
#   scripts/slurm/local_cluster.sh stop [DIR]    # stops every daemon it started
#
# DIR defaults to /tmp/ddprun-slurm. Environment: NODES (default 2, at most 9), PORT_BASE (default
# 17000: slurmctld on PORT_BASE, node i's slurmd on PORT_BASE + i), CPUS per node (default 4),
# NODE_NAMES (default "resolvable").
#
# With resolvable names, nodes n1, n2, ... resolve to their addresses inside the jobs, but this
# script does not touch /etc/hosts: every slurmd starts in a mount namespace of its own where
# DIR/hosts is bind-mounted over /etc/hosts, and its jobs inherit that view.
# NODE_NAMES=unresolvable names them sn1, sn2, ... and puts no name in DIR/hosts: only Slurm knows
# their addresses (NodeName=sn1 NodeAddr=127.0.0.2), a layout Slurm supports and ddprun must too.
set -euo pipefail

action=${1:-}
dir=${2:-/tmp/ddprun-slurm}
nodes=${NODES:-2}
port_base=${PORT_BASE:-17000}
cpus=${CPUS:-4}
node_names=${NODE_NAMES:-resolvable}
case "$node_names" in
  resolvable) prefix=n ;;
  unresolvable) prefix=sn ;;
  *) echo "local_cluster: NODE_NAMES must be resolvable or unresolvable, got $node_names" >&2; exit 1 ;;
esac

say() { echo "local_cluster: $*" >&2; }
# Once daemons are starting, a failure stops those that did (starting=1).
die() {
  say "$*"
  if [ "${starting:-0}" = 1 ]; then starting=0; stop_cluster; fi
  exit 1
}

# A pid of ours only while it still runs one of the programs this script starts: a pid recorded
# long ago may belong to something else now.
ours() {
  local command
  [ -r "/proc/$1/cmdline" ] || return 1
  command=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
  case "$command" in
    */munged\ *|*/slurmctld\ *|*/slurmd\ *) [[ "$command" == *"$dir"* || "$command" == *ddprun-munge* ]] ;;
    *) return 1 ;;
  esac
}

# DIR must be ours to wipe: a directory (not a link) that root owns, or nothing yet.
check_dir() {
  [ ! -L "$dir" ] || die "$dir is a symbolic link; give a directory of your own"
  if [ -e "$dir" ]; then
    [ -d "$dir" ] && [ "$(stat -c %u "$dir")" = "$(id -u)" ] || die "$dir exists and is not a directory of this user's"
  fi
}

install_slurm() {
  local missing=()
  for package in munge slurmctld slurmd slurm-client; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# Pids recorded in DIR/pids, one per line, of every daemon this script started.
stop_cluster() {
  [ -f "$dir/pids" ] || { say "nothing to stop in $dir"; return 0; }
  local pids="" pid
  for pid in $(cat "$dir/pids"); do ours "$pid" && pids="$pids $pid"; done
  # What the nodes' jobs left (slurmstepd and the programs it ran) lives in the slurmds' mount
  # namespaces. A namespace's number is reused once its last process is gone (another test's
  # `unshare -m` got one and was killed), so a namespace is matched only while its slurmd, stopped
  # here so that it starts nothing new, holds it; never this shell's own.
  local namespaces="" own ns proc
  own=$(readlink /proc/self/ns/mnt)
  for pid in $pids; do
    ns=$(readlink "/proc/$pid/ns/mnt" 2>/dev/null) || continue
    [ "$ns" != "$own" ] && kill -STOP "$pid" 2>/dev/null && namespaces="$namespaces $ns "
  done
  if [ -n "$namespaces" ]; then
    for _ in 1 2; do  # twice: a process forked while the first pass ran
      for proc in /proc/[0-9]*; do
        case " $pids " in *" ${proc#/proc/} "*) continue ;; esac
        ns=$(readlink "$proc/ns/mnt" 2>/dev/null) || continue
        case "$namespaces" in *" $ns "*) kill -9 "${proc#/proc/}" 2>/dev/null || true ;; esac
      done
    done
  fi
  # shellcheck disable=SC2086
  [ -z "$pids" ] || { kill $pids 2>/dev/null; kill -CONT $pids 2>/dev/null; } || true
  for _ in $(seq 50); do
    local alive=0
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  if [ -f "$dir/munge_dir" ]; then
    local munge
    munge=$(cat "$dir/munge_dir")
    case "$munge" in /tmp/ddprun-munge-??????) rm -rf "$munge" ;; esac
  fi
  rm -f "$dir/pids" "$dir/munge_dir"
  say "stopped"
}

start_cluster() {
  [ "$(id -u)" -eq 0 ] || die "needs root (slurmd runs jobs as their users, munged as munge)"
  [ "$nodes" -ge 1 ] && [ "$nodes" -le 9 ] || die "NODES must be 1..9, got $nodes"
  install_slurm
  check_dir
  [ -f "$dir/pids" ] && stop_cluster
  rm -rf "$dir"
  mkdir -p "$dir"/{state,log}
  : >"$dir/pids"
  starting=1
  trap 'die "start failed at line $LINENO"' ERR
  local host
  host=$(hostname -s)

  # munged of our own, on a socket of our own, run as the munge user as it insists. Its directory is
  # outside DIR, which may sit in a directory only root can enter.
  [ -r /etc/munge/munge.key ] || die "no /etc/munge/munge.key (reinstall the munge package)"
  local munge
  munge=$(mktemp -d /tmp/ddprun-munge-XXXXXX)
  echo "$munge" >"$dir/munge_dir"
  chown munge:munge "$munge"
  local socket="$munge/munge.socket"
  runuser -u munge -- /usr/sbin/munged --socket="$socket" --pid-file="$munge/munged.pid" \
    --log-file="$munge/munged.log" --seed-file="$munge/munged.seed" --force
  for _ in $(seq 50); do [ -s "$munge/munged.pid" ] && [ -S "$socket" ] && break; sleep 0.1; done
  [ -s "$munge/munged.pid" ] || die "munged did not start: $(tail -3 "$munge/munged.log" 2>/dev/null)"
  cat "$munge/munged.pid" >>"$dir/pids"

  {
    cat /etc/hosts
    if [ "$node_names" = resolvable ]; then for i in $(seq "$nodes"); do echo "127.0.0.$((i + 1)) n$i"; done; fi
  } >"$dir/hosts"

  local conf="$dir/slurm.conf"
  cat >"$conf" <<EOF
ClusterName=ddprun-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port_base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: how long a killed job's credential stays revoked, which is also how long Slurm holds a
# requeued job before it may start again (default 120 s; the tests requeue).
AuthInfo=socket=$socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=5
MinJobAge=300
SlurmdTimeout=30
InactiveLimit=0
EOF
  for i in $(seq "$nodes"); do
    echo "NodeName=$prefix$i NodeAddr=127.0.0.$((i + 1)) NodeHostname=$host Port=$((port_base + i)) CPUs=$cpus State=UNKNOWN" >>"$conf"
  done
  echo "PartitionName=debug Nodes=$prefix[1-$nodes] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >>"$conf"

  export SLURM_CONF="$conf"
  /usr/sbin/slurmctld -f "$conf" -i || die "slurmctld did not start: $(tail -5 "$dir/log/slurmctld.log" 2>/dev/null)"
  for _ in $(seq 50); do [ -s "$dir/slurmctld.pid" ] && break; sleep 0.1; done
  [ -s "$dir/slurmctld.pid" ] || die "slurmctld wrote no pid file: $(tail -5 "$dir/log/slurmctld.log" 2>/dev/null)"
  cat "$dir/slurmctld.pid" >>"$dir/pids"
  for i in $(seq "$nodes"); do
    unshare --mount --propagation private -- sh -c \
      "mount --bind '$dir/hosts' /etc/hosts && exec /usr/sbin/slurmd -f '$conf' -N $prefix$i" ||
      die "slurmd $prefix$i did not start: $(tail -5 "$dir/log/slurmd-$prefix$i.log" 2>/dev/null)"
  done
  for i in $(seq "$nodes"); do
    local node="$prefix$i"
    for _ in $(seq 50); do [ -s "$dir/slurmd-$node.pid" ] && break; sleep 0.1; done
    [ -s "$dir/slurmd-$node.pid" ] || die "slurmd $node wrote no pid file: $(tail -5 "$dir/log/slurmd-$node.log" 2>/dev/null)"
    cat "$dir/slurmd-$node.pid" >>"$dir/pids"
  done

  # Ready when every node is idle; a daemon that died says why in its log.
  local deadline=$((SECONDS + 30)) pid
  while [ $SECONDS -lt $deadline ]; do
    for pid in $(cat "$dir/pids"); do
      kill -0 "$pid" 2>/dev/null || die "a daemon (pid $pid) exited: $(tail -n 2 "$dir"/log/*.log 2>/dev/null | tr '\n' ' ')"
    done
    if [ "$(timeout 5 sinfo -h -N -o '%t' 2>/dev/null | grep -c '^idle' || true)" -eq "$nodes" ]; then
      starting=0
      trap - ERR
      say "$nodes node(s) idle; export SLURM_CONF=$conf"
      return 0
    fi
    sleep 0.1
  done
  die "nodes did not become idle within 30 s: $(sinfo -N 2>&1 | tr '\n' ' ')"
}

case "$action" in
  start) start_cluster ;;
  stop) stop_cluster ;;
  *) die "usage: $0 start|stop [DIR]" ;;
esac
