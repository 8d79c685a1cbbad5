# Sourced by the device scripts (gpu_demo.sh, gpu_coder.sh, gpu_mtp.sh): the steps they share
# for a run started with `speclib run ... --detach --out RUN`.
#   run_going RUN                       true while that run's kit process is alive
#   wait_for_run RUN STARTED LIMIT N    wait up to LIMIT seconds for it to end, on its report
#                                       or its error alike; say which, with the seconds since
#                                       the time in the file STARTED, and its log's last N lines
#   pack_run RUN OUT FILE...            copy the FILEs the run wrote into OUT, then the raw run
#                                       folder (no notebooks, pids, analyses) as run-gpu-raw.tgz

run_going() { pgrep -f "[s]peclib run --out $1" >/dev/null; }

wait_for_run() {
  local run=$1 started=$2 end=$(( $(date +%s) + $3 )) lines=$4 state=ended
  while [[ $(date +%s) -lt $end ]] && run_going "$run"; do sleep 5; done
  run_going "$run" && state="still running"
  echo "$state after $(( $(date +%s) - $(cat "$started") )) s:"
  tail -n "$lines" "$run/run.log" 2>/dev/null || true
}

pack_run() {
  local run=$1 out=$2 f; shift 2
  mkdir -p "$out"
  for f in "$@"; do [[ -f "$run/$f" ]] && cp "$run/$f" "$out/"; done
  tar -czf "$out"/run-gpu-raw.tgz -C "$(dirname "$run")" --exclude=notebooks --exclude='*.pid' \
    --exclude=analyses "$(basename "$run")"
  ls -l "$out"
}
