#!/usr/bin/env bash
# A Spark standalone cluster on this machine for dbt's `--target cluster`:
# one master and N workers (default 2, 1 core each) from PySpark's own
# bin/spark-class (SPARK_HOME = the pyspark package of the venv; nothing is
# downloaded), all bound to 127.0.0.1.
#
#   scripts/cluster.sh up       start what is not running, wait until every worker is registered
#   scripts/cluster.sh down     stop them by their pid files and wait until they have exited
#   scripts/cluster.sh status   what runs (exit 0 when the whole cluster is up, 1 otherwise)
#
# Logs, pid files and the workers' work folders (executor logs) live in
# DBT_MERGE_CLUSTER_DIR (default .cluster/ in the repository); `up` starts each process
# with a fresh log and work folder, `down` leaves them for reading. Settings, all by env:
#   DBT_MERGE_CLUSTER_DIR             state folder                          (.cluster)
#   DBT_MERGE_CLUSTER_PYTHON          the venv's python (SPARK_HOME, PYSPARK_PYTHON) (.venv/bin/python)
#   DBT_MERGE_CLUSTER_HOST            address everything binds to           (127.0.0.1)
#   DBT_MERGE_CLUSTER_MASTER_PORT     master RPC port                       (7077, the profile's default)
#   DBT_MERGE_CLUSTER_MASTER_UI_PORT  master web UI (and its /json/)        (8980)
#   DBT_MERGE_CLUSTER_WORKER_UI_PORT  first worker's web UI; worker i uses +i-1 (8981; 0 = any free port)
#   DBT_MERGE_CLUSTER_WORKER_PORT     first worker's RPC port; worker i uses +i-1 (0 = any free port)
#   DBT_MERGE_CLUSTER_WORKERS         number of workers                     (2)
#   DBT_MERGE_CLUSTER_WORKER_CORES    cores of each worker                  (1)
#   DBT_MERGE_CLUSTER_WORKER_MEMORY   memory each worker offers executors   (2g: the profile's
#                                     executor memory, DBT_MERGE_EXECUTOR_MEMORY, must fit)
#   DBT_MERGE_CLUSTER_DAEMON_MEMORY   heap of the master and worker JVMs    (512m)
#   DBT_MERGE_CLUSTER_TIMEOUT         seconds `up` waits for the master and workers (300);
#                                     it polls with back-off (0.2 s doubling to 5 s) and
#                                     says every DBT_MERGE_CLUSTER_PROGRESS seconds (10)
#                                     what it is still waiting for
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${DBT_MERGE_CLUSTER_DIR:-$ROOT/.cluster}
PY=${DBT_MERGE_CLUSTER_PYTHON:-$ROOT/.venv/bin/python}
HOST=${DBT_MERGE_CLUSTER_HOST:-127.0.0.1}
MASTER_PORT=${DBT_MERGE_CLUSTER_MASTER_PORT:-7077}
MASTER_UI_PORT=${DBT_MERGE_CLUSTER_MASTER_UI_PORT:-8980}
WORKER_UI_PORT=${DBT_MERGE_CLUSTER_WORKER_UI_PORT:-8981}
WORKER_PORT=${DBT_MERGE_CLUSTER_WORKER_PORT:-0}
WORKERS=${DBT_MERGE_CLUSTER_WORKERS:-2}
WORKER_CORES=${DBT_MERGE_CLUSTER_WORKER_CORES:-1}
WORKER_MEMORY=${DBT_MERGE_CLUSTER_WORKER_MEMORY:-2g}
DAEMON_MEMORY=${DBT_MERGE_CLUSTER_DAEMON_MEMORY:-512m}
TIMEOUT=${DBT_MERGE_CLUSTER_TIMEOUT:-300}
PROGRESS=${DBT_MERGE_CLUSTER_PROGRESS:-10}

MASTER_URL="spark://$HOST:$MASTER_PORT"
UI_URL="http://$HOST:$MASTER_UI_PORT"
# absolute (not resolved: the venv's python is a symlink that must stay the venv's)
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
case $PY in /*) ;; *) PY=$PWD/$PY ;; esac
LOGS=$DIR/logs
PIDS=$DIR/pids

say() { printf 'cluster: %s\n' "$*"; }

# waiting with back-off: `pause` sleeps 0.2 s, doubling up to 5 s; `waiting WHAT`
# reports progress every PROGRESS seconds while `up` waits (reset_wait starts over)
reset_wait() { delay=0.2; waited_from=$SECONDS; reported_at=$SECONDS; }
pause() {
  sleep "$delay"
  delay=$(awk -v d="$delay" 'BEGIN { d *= 2; if (d > 5) d = 5; print d }')
}
waiting() {
  if [ $((SECONDS - reported_at)) -ge "$PROGRESS" ]; then
    say "waiting $((SECONDS - waited_from))s of ${TIMEOUT}s for: $*"
    reported_at=$SECONDS
  fi
}
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

names() {
  echo master
  local i
  for ((i = 1; i <= WORKERS; i++)); do echo "worker-$i"; done
}

# offset port: "0" stays 0 (any free port), otherwise base + i - 1
nth_port() { if [ "$1" = 0 ]; then echo 0; else echo $(($1 + $2 - 1)); fi; }

# The pid in NAME's pid file if that process is alive and is this cluster's (a Spark
# deploy class in its command line, this state folder in its command line or, while
# spark-class still prepares the java command, in its environment), else nothing.
# the pid that the pid file of $1 holds, or nothing
recorded_pid() {
  local pid
  pid=$(cat "$PIDS/$1.pid" 2>/dev/null || true)
  if [[ $pid =~ ^[0-9]+$ ]]; then echo "$pid"; fi
}

live_pid() {
  local pid cmd env
  pid=$(recorded_pid "$1")
  [ -n "$pid" ] || return 0
  if [ ! -r "/proc/$pid/cmdline" ]; then  # no /proc (macOS): trust the pid file
    if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
    return 0
  fi
  cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
  [[ $cmd == *org.apache.spark.deploy.* ]] || return 0
  env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null || true)
  if [[ $cmd == *"-Ddbt_merge.cluster=$DIR "* || $env == *"-Ddbt_merge.cluster=\"$DIR\""* ]]; then
    echo "$pid"
  fi
}

# whether the process launched as $1 has ended: its pid runs no more, or is a zombie.
# Right after a launch, live_pid can miss a process for an instant, while it execs from
# bash to spark-class to its JVM (its command line reads empty): a wait for a process
# to start asks this before it calls the process exited.
gone() {
  local pid state
  pid=$(recorded_pid "$1")
  [ -n "$pid" ] || return 0
  kill -0 "$pid" 2>/dev/null || return 0
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [ "$state" = Z ]
}

port_busy() { [ "$1" != 0 ] && (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# alive workers according to the master's /json/ (-1 if the UI does not answer)
alive_workers() {
  "$PY" - "$UI_URL/json/" <<'EOF' 2>/dev/null || echo -1
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=3) as response:
    print(json.load(response).get("aliveworkers", 0))
EOF
}

spark_home() {
  [ -x "$PY" ] || die "no Python at $PY: run \`make install\` first (or set DBT_MERGE_CLUSTER_PYTHON)."
  "$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null \
    || die "$PY cannot import pyspark: run \`make install\` first."
}

# start NAME with `spark-class ARGS...` in a session of its own; the pid file holds
# the pid of the JVM: setsid (which does not fork here: a job of a script without job
# control does not lead its process group) and spark-class exec in turn, so it is the
# background job's pid, written here at once. It returns once live_pid knows the
# process (it has exec'd spark-class) or the process has ended, so that a `down` right
# after it finds what it started. (The pid file was once written by the new process
# itself, within 5 s: on a loaded machine a `down` came first and left a worker running.)
launch() {
  local name=$1 log=$LOGS/$1.log pidfile=$PIDS/$1.pid i
  shift
  : >"$log"
  local detach=()  # a session of its own where setsid exists (not on macOS)
  if command -v setsid >/dev/null; then detach=(setsid); fi
  ${detach[@]+"${detach[@]}"} "$SPARK_HOME/bin/spark-class" "$@" </dev/null >>"$log" 2>&1 &
  echo $! >"$pidfile"
  for ((i = 0; i < 600; i++)); do
    if [ -n "$(live_pid "$name")" ] || gone "$name"; then break; fi
    sleep 0.1
  done
  say "started $name (pid $!, log $log)"
}

log_tails() {
  local name
  for name in $(names); do
    [ -f "$LOGS/$name.log" ] || continue
    printf '\n--- last lines of %s ---\n' "$LOGS/$name.log" >&2
    tail -n 25 "$LOGS/$name.log" >&2
  done
}

registered() { grep -q "Successfully registered with master" "$LOGS/$1.log" 2>/dev/null; }

up() {
  "$ROOT/scripts/check_java.sh"
  SPARK_HOME=$(spark_home)
  mkdir -p "$LOGS" "$PIDS"
  local name started=0 pid i

  # pid files of processes that are gone are stale; ports held by others are an error
  for name in $(names); do
    if [ -z "$(live_pid "$name")" ]; then rm -f "$PIDS/$name.pid"; fi
  done
  if [ -z "$(live_pid master)" ]; then
    for pair in "MASTER_PORT:$MASTER_PORT" "MASTER_UI_PORT:$MASTER_UI_PORT"; do
      if port_busy "${pair#*:}"; then
        die "port ${pair#*:} on $HOST is in use by a process that is not this cluster" \
          "(set DBT_MERGE_CLUSTER_${pair%%:*} to a free port)."
      fi
    done
  fi
  for ((i = 1; i <= WORKERS; i++)); do
    [ -z "$(live_pid "worker-$i")" ] || continue
    for port in "$(nth_port "$WORKER_PORT" "$i")" "$(nth_port "$WORKER_UI_PORT" "$i")"; do
      if port_busy "$port"; then
        die "port $port on $HOST (worker-$i) is in use by a process that is not this cluster" \
          "(set DBT_MERGE_CLUSTER_WORKER_PORT / DBT_MERGE_CLUSTER_WORKER_UI_PORT)."
      fi
    done
  done

  export SPARK_HOME SPARK_LOCAL_IP=$HOST PYSPARK_PYTHON=$PY SPARK_DAEMON_MEMORY=$DAEMON_MEMORY
  # the marker names the state folder in each JVM's command line (see live_pid);
  # maxRetries=0: a busy port is an error, not a silent move to the next one
  export SPARK_DAEMON_JAVA_OPTS="-Ddbt_merge.cluster=\"$DIR\" -Dspark.port.maxRetries=0"
  export SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false"
  # finished applications' folders go after a day (checked every 30 minutes)
  export SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.appDataTtl=86400"

  if [ -z "$(live_pid master)" ]; then
    launch master org.apache.spark.deploy.master.Master \
      --host "$HOST" --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT"
    started=1
  fi
  # workers register at once when the master already listens
  local deadline=$((SECONDS + TIMEOUT))
  reset_wait
  until port_busy "$MASTER_PORT"; do
    if [ -z "$(live_pid master)" ] && gone master; then
      printf 'cluster: the master exited while starting.\n' >&2
      log_tails
      down >/dev/null 2>&1 || true
      exit 1
    fi
    [ $SECONDS -lt $deadline ] || break
    waiting "the master to listen on $HOST:$MASTER_PORT"
    pause
  done
  for ((i = 1; i <= WORKERS; i++)); do
    [ -z "$(live_pid "worker-$i")" ] || continue
    # a fresh work folder, as the log is fresh: each application leaves its executors'
    # logs and a copy of the Iceberg jar (~40 MB) there
    rm -rf "$DIR/work/worker-$i"
    mkdir -p "$DIR/work/worker-$i"
    launch "worker-$i" org.apache.spark.deploy.worker.Worker \
      --host "$HOST" --port "$(nth_port "$WORKER_PORT" "$i")" \
      --webui-port "$(nth_port "$WORKER_UI_PORT" "$i")" \
      --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" \
      --work-dir "$DIR/work/worker-$i" "$MASTER_URL"
    started=1
  done

  local alive=-1 missing
  reset_wait
  while :; do
    missing=""
    for name in $(names); do
      if [ -z "$(live_pid "$name")" ] && gone "$name"; then missing="$missing $name (exited)"; fi
    done
    for ((i = 1; i <= WORKERS; i++)); do
      registered "worker-$i" || missing="$missing worker-$i (not registered)"
    done
    alive=$(alive_workers)
    if [ -z "$missing" ] && [ "$alive" -ge "$WORKERS" ]; then break; fi
    if [[ $missing == *exited* ]] || [ $SECONDS -ge $deadline ]; then
      if [[ $missing == *exited* ]]; then
        printf 'cluster: a process exited while starting:' >&2
      else
        printf 'cluster: not up after %ss:' "$TIMEOUT" >&2
      fi
      printf '%s; the master reports %s alive worker(s) of %s.\n' \
        "${missing:- (master UI not answering)}" "$alive" "$WORKERS" >&2
      log_tails
      printf '\ncluster: stopping what runs; the logs stay in %s\n' "$LOGS" >&2
      down >&2 || true
      exit 1
    fi
    local what=${missing# }
    waiting "${what:-the master to list every worker as alive} ($alive of $WORKERS alive)"
    pause
  done
  if [ $started = 0 ]; then say "already up"; else say "up"; fi
  say "master $MASTER_URL (UI $UI_URL), $alive workers x $WORKER_CORES core(s), $WORKER_MEMORY each"
  if [ "$MASTER_URL" != "spark://127.0.0.1:7077" ]; then
    say "for dbt: export DBT_MERGE_SPARK_MASTER=$MASTER_URL"
  fi
}

# A launched process leads a session of its own (setsid): its target is then its whole
# process group, which also holds what spark-class runs before it execs java (a
# subshell and the launcher JVM). Without setsid, the process alone.
target() {
  local pgid
  pgid=$(ps -o pgid= -p "$1" 2>/dev/null | tr -d ' ')
  if [ "$pgid" = "$1" ]; then echo "-$1"; else echo "$1"; fi
}

# stop the pids of the pid files (workers first), wait until they are gone
down() {
  local name pid pids=() i
  for name in $(names | sort -r); do  # workers first (worker-N ... worker-1), then master
    pid=$(live_pid "$name")
    if [ -n "$pid" ]; then
      pid=$(target "$pid")
      kill -TERM -- "$pid" 2>/dev/null || true
      pids+=("$name:$pid")
    fi
  done
  if [ ${#pids[@]} = 0 ]; then
    rm -f "$PIDS"/*.pid 2>/dev/null || true
    say "not running"
    return 0
  fi
  for entry in "${pids[@]}"; do
    name=${entry%%:*} pid=${entry#*:}
    for ((i = 0; i < 150; i++)); do kill -0 -- "$pid" 2>/dev/null || break; sleep 0.2; done
    if kill -0 -- "$pid" 2>/dev/null; then
      say "$name (pid ${pid#-}) did not stop within 30 s: killing it"
      kill -KILL -- "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kill -0 -- "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    if kill -0 -- "$pid" 2>/dev/null; then die "$name (pid ${pid#-}) is still running"; fi
    rm -f "$PIDS/$name.pid"
    say "stopped $name (pid ${pid#-})"
  done
  rm -f "$PIDS"/*.pid 2>/dev/null || true
}

status() {
  local name pid all=0
  for name in $(names); do
    pid=$(live_pid "$name")
    if [ -n "$pid" ]; then
      say "$name running (pid $pid)"
    else
      say "$name not running"
      all=1
    fi
  done
  if [ -n "$(live_pid master)" ]; then
    local alive
    alive=$(alive_workers)
    say "master $MASTER_URL (UI $UI_URL): $alive alive worker(s) of $WORKERS"
    [ "$alive" -ge "$WORKERS" ] || all=1
  fi
  return $all
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *)
    echo "usage: $0 up|down|status (settings: see the comments at the top of this script)" >&2
    exit 2
    ;;
esac
