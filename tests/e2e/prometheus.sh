#!/bin/sh
# prometheus.sh CASE STOKE FAKE_NVML SCENARIOS WORKDIR - one end-to-end case of
# --prometheus (docs/prometheus.md) on the built binary: curl scrapes checked by
# promtool, a real Prometheus server scraping stoke, hostile clients, and the errors.
# Skipped (77) where curl, promtool or prometheus is missing. No timing thresholds: the
# waits poll for a state, bounded by attempts (ctest's TIMEOUT bounds the whole).
set -u
case_name=$1 stoke=$2 fake_nvml=$3 scenarios=$4 work=$5
dir="$work/$case_name"
rm -rf "$dir"
mkdir -p "$dir"
here=$(cd "$(dirname "$0")" && pwd)
py="/usr/bin/python3 $here/prometheus_client.py"
out="$dir/stdout" err="$dir/stderr"
export STOKE_CACHE_DIR="$dir/cache"
unset BATCH_SIZE VAL_BATCH_SIZE NUM_WORKERS PREFETCH_FACTOR AMP PRECISION EPOCHS LR SEED \
    ACCUMULATE EFFECTIVE_BATCH STOKE_DEVICE STOKE_RECOMPUTE STOKE_TUNE
bg=""

cleanup() { for p in $bg; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT
fail() {
    echo "FAIL [$case_name]: $*"
    echo "--- stdout"; tail -n 40 "$out" 2>/dev/null
    echo "--- stderr"; tail -n 40 "$err" 2>/dev/null
    exit 1
}
ok() { echo "ok   [$case_name] $*"; }
need() {
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || {
            pkg=$tool
            [ "$tool" = promtool ] && pkg=prometheus # promtool comes with the server
            echo "skip [$case_name]: $tool is missing (apt-get install $pkg, or scripts/deps --test)"
            exit 77
        }
    done
}
need_data() {
    data=/usr/share/datasets/fashion-mnist
    [ -d "$data" ] || { echo "skip [$case_name]: $data is missing (dataset-fashion-mnist)"; exit 77; }
}
# wait_url: the URL stoke printed ("prometheus: http://...") into $url.
# No clock: each wait ends when what it waits for happens or the process it waits on
# ends; a hang is bounded by ctest's TIMEOUT, never by a count of polls.
wait_url() {
    url=""
    while :; do
        url=$(sed -n 's/^prometheus: \(http:[^ ]*\)$/\1/p' "$out" | head -n 1)
        [ -n "$url" ] && return 0
        kill -0 "$pid" 2>/dev/null || fail "stoke ended before printing its URL"
        sleep 0.1
    done
}
# scrape FILE: one scrape into FILE, which promtool must accept.
scrape() {
    curl -sS -o "$1" -D "$1.headers" "$url" || fail "curl $url failed"
    grep -qi '^Content-Type: text/plain; version=0.0.4' "$1.headers" ||
        fail "Content-Type: $(cat "$1.headers")"
    promtool check metrics <"$1" >"$1.promtool" 2>&1 || {
        cat "$1.promtool"; fail "promtool check metrics refused $1"
    }
}
# wait_metric NAME FILE: scrape until NAME has a sample.
wait_metric() {
    while :; do
        scrape "$2"
        grep -q "^$1[ {]" "$2" && return 0
        kill -0 "$pid" 2>/dev/null || fail "stoke ended while waiting for $1"
        sleep 0.1
    done
}
value() { sed -n "s/^$1 \([0-9.e+-]*\)$/\1/p" "$2" | head -n 1; }
# A training run slow enough to be scraped: each sample costs 1 ms more to load.
start_train() {
    need_data
    STOKE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "$stoke" train --model mlp \
        --limit 3200 --batch-size 32 --loader-delay-us 1000 --epochs 1000 --tune off \
        --log-every 1 --log "$dir/train.jsonl" "$@" >"$out" 2>"$err" &
    pid=$!
    bg="$bg $pid"
    echo "$pid" >"$dir/pid"
}
# stop_train: SIGINT ends a run after its step, as Ctrl-C does: status 130.
stop_train() {
    kill -INT "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 130 ] || fail "stoke train ended $rc after SIGINT, expected 130"
    grep -q "stopped after step" "$out" || fail "no 'stopped after step' line"
}

# A stoke built without libmicrohttpd refuses the flag (docs/prometheus.md): skipped.
if "$stoke" monitor --prometheus 127.0.0.1:0 -- true 2>&1 | grep -q "without libmicrohttpd"; then
    echo "skip [$case_name]: this stoke was built without libmicrohttpd (libmicrohttpd-dev)"
    exit 77
fi

case $case_name in
monitor)
    need curl promtool
    STOKE_NVML_LIBRARY=$fake_nvml STOKE_FAKE_GPU_SCENARIO="$scenarios/monitor_healthy.gpu" \
        "$stoke" monitor --interval 0.1 --prometheus 127.0.0.1:0 -- sleep 600 >"$out" 2>"$err" &
    pid=$!
    bg="$bg $pid"
    wait_url
    case $url in http://127.0.0.1:*/metrics) ;; *) fail "URL $url" ;; esac
    wait_metric stoke_process_cpu_cores "$dir/s1"
    for m in DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_FB_USED DCGM_FI_DEV_POWER_USAGE stoke_host_cpu_busy_ratio \
        stoke_host_memory_used_bytes stoke_process_resident_memory_bytes stoke_monitor_samples_total; do
        grep -q "^$m[ {]" "$dir/s1" || fail "no $m in the scrape"
    done
    grep -q '^DCGM_FI_DEV_GPU_UTIL{gpu="0",uuid="GPU-3090-c",name="NVIDIA GeForce RTX 3090"} ' "$dir/s1" ||
        fail "GPU labels: $(grep '^DCGM_FI_DEV_GPU_UTIL' "$dir/s1")"
    n1=$(value stoke_monitor_samples_total "$dir/s1")
    while :; do
        scrape "$dir/s2"
        n2=$(value stoke_monitor_samples_total "$dir/s2")
        [ "$n2" -gt "$n1" ] && break
        kill -0 "$pid" 2>/dev/null || fail "stoke ended with the samples counter at $n1"
        sleep 0.1
    done
    ok "scrapes pass promtool; samples $n1 -> $n2; GPU labels"
    # HEAD, and a bad method through curl
    curl -sS -I "$url" | grep -q '^HTTP/1.1 200' || fail "HEAD /metrics"
    code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$url")
    [ "$code" = 405 ] || fail "PUT gave $code"
    code=$(curl -s -o /dev/null -w '%{http_code}' "${url%/metrics}/")
    [ "$code" = 404 ] || fail "/ gave $code"
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 143 ] || fail "stoke monitor ended $rc after SIGTERM (the command's 143 expected)"
    ok "HEAD 200, PUT 405, / 404, ends with its command" ;;
train)
    need curl promtool
    start_train --prometheus 127.0.0.1:0
    wait_url
    wait_metric stoke_train_steps_total "$dir/s1"
    for m in stoke_train_samples_per_second stoke_train_loss stoke_train_learning_rate \
        stoke_train_data_wait_ratio stoke_train_epoch; do
        grep -q "^$m[ {]" "$dir/s1" || fail "no $m in the scrape"
    done
    grep -q '^stoke_train_phase_ratio{phase="forward"} ' "$dir/s1" || fail "no forward phase"
    s1=$(value stoke_train_steps_total "$dir/s1")
    while :; do
        scrape "$dir/s2"
        s2=$(value stoke_train_steps_total "$dir/s2")
        [ "$s2" -gt "$s1" ] && break
        kill -0 "$pid" 2>/dev/null || fail "stoke ended with the step counter at $s1"
        sleep 0.1
    done
    # the embedded monitor's readings come with its first sample
    wait_metric stoke_process_cpu_cores "$dir/s3"
    grep -q '^stoke_host_cpu_busy_ratio ' "$dir/s3" || fail "no stoke_host_cpu_busy_ratio"
    ok "scrapes pass promtool; steps $s1 -> $s2; the monitor's readings"
    stop_train
    ok "SIGINT: 130"
    # Data parallel: rank 0 alone serves. On a fixed port a second server would fail to
    # bind it and end the run, so a run that ends 0 had one.
    if command -v mpirun >/dev/null 2>&1; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
        port=$($py free-port)
        ASAN_OPTIONS=detect_leaks=0 STOKE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 \
            "$stoke" train --model mlp --limit 512 --batch-size 32 --epochs 1 --max-steps 4 \
            --tune off --nproc 2 --prometheus "127.0.0.1:$port" >"$out" 2>"$err"
        rc=$?
        [ "$rc" -eq 0 ] || fail "--nproc 2 --prometheus: status $rc"
        [ "$(grep -c '^prometheus: ' "$out")" -eq 1 ] || fail "--nproc 2: not one 'prometheus:' line"
        ok "--nproc 2: rank 0 alone serves"
    else
        echo "note [$case_name]: no mpirun, the data parallel part is not run"
    fi ;;
prometheus-server)
    need curl promtool prometheus
    STOKE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 \
        "$stoke" monitor --interval 0.2 --prometheus 127.0.0.1:0 -- sleep 600 >"$out" 2>"$err" &
    pid=$!
    bg="$bg $pid"
    wait_url
    target=${url#http://}
    target=${target%/metrics}
    pport=$($py free-port)
    cat >"$dir/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: stoke
    static_configs:
      - targets: ['$target']
EOF
    promtool check config "$dir/prometheus.yml" >/dev/null || fail "promtool check config"
    prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
        --web.listen-address="127.0.0.1:$pport" >"$dir/prometheus.log" 2>&1 &
    ppid_=$!
    bg="$bg $ppid_"
    until $py query "http://127.0.0.1:$pport" stoke_host_memory_total_bytes >"$dir/q1" 2>/dev/null; do
        kill -0 "$ppid_" 2>/dev/null || { tail "$dir/prometheus.log"; fail "prometheus ended"; }
        kill -0 "$pid" 2>/dev/null || fail "stoke ended before Prometheus returned its series"
        sleep 0.2
    done
    grep -q '"job": "stoke"' "$dir/q1" || fail "the series lacks job=stoke: $(cat "$dir/q1")"
    $py query "http://127.0.0.1:$pport" stoke_info >"$dir/q2" || fail "no stoke_info in Prometheus"
    curl -s "http://127.0.0.1:$pport/api/v1/query?query=up%7Bjob%3D%22stoke%22%7D" | grep -q '"1"\]' ||
        fail "up{job=stoke} is not 1"
    ok "Prometheus scraped stoke; its API returns $(cat "$dir/q1")"
    kill -TERM "$pid"
    wait "$pid" ;;
hostile)
    need curl promtool
    start_train --prometheus 127.0.0.1:0
    wait_url
    wait_metric stoke_train_steps_total "$dir/s1"
    port=${url#http://127.0.0.1:}
    port=${port%/metrics}
    $py hostile "$port" "$dir/train.jsonl" "$dir/pid" step || fail "the hostile clients (above)"
    scrape "$dir/s2"
    stop_train
    ok "stoke kept training and serving under attack" ;;
hostile-monitor)
    # The same against stoke monitor, whose sampler must go on sampling (this case runs
    # under ThreadSanitizer too: the training ones run the nn kernels, which it skips).
    need curl promtool
    "$stoke" monitor --interval 0.1 --jsonl "$dir/m.jsonl" --prometheus 127.0.0.1:0 -- sleep 100000 \
        >"$out" 2>"$err" &
    pid=$!
    bg="$bg $pid"
    echo "$pid" >"$dir/pid"
    wait_url
    wait_metric stoke_monitor_samples_total "$dir/s1"
    port=${url#http://127.0.0.1:}
    port=${port%/metrics}
    $py hostile "$port" "$dir/m.jsonl" "$dir/pid" sample || fail "the hostile clients (above)"
    scrape "$dir/s2"
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 143 ] || fail "stoke monitor ended $rc after SIGTERM"
    ok "stoke kept sampling and serving under attack" ;;
errors)
    need curl
    # The port taken: a clear error naming the address, status 1, and the command not run.
    $py hold 0 "$dir/port" &
    hpid=$!
    bg="$bg $hpid"
    until [ -s "$dir/port" ]; do kill -0 $hpid 2>/dev/null || fail "the port holder ended"; sleep 0.1; done
    taken=$(cat "$dir/port")
    "$stoke" monitor --prometheus "127.0.0.1:$taken" -- touch "$dir/ran" >"$out" 2>"$err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "a taken port: status $rc"
    grep -q "127.0.0.1:$taken: cannot listen there: Address already in use" "$err" || fail "the taken port's message"
    [ ! -e "$dir/ran" ] || fail "the command ran although the port was taken"
    need_data
    "$stoke" train --model mlp --limit 256 --epochs 1 --tune off --prometheus "localhost:$taken" >"$out" 2>"$err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "train on a taken port: status $rc"
    grep -q "127.0.0.1:$taken: cannot listen there" "$err" || fail "train's taken-port message"
    grep -q "^training:" "$out" && fail "train started although the port was taken"
    ok "a taken port: $(cat "$err")"
    # Not loopback: refused unless --prometheus-public.
    "$stoke" monitor --prometheus 0.0.0.0:0 -- true >"$out" 2>"$err"
    rc=$?
    [ "$rc" -eq 1 ] || fail "0.0.0.0: status $rc"
    grep -q "not a loopback address.*--prometheus-public" "$err" || fail "the public address's message"
    ok "not loopback: $(cat "$err")"
    "$stoke" monitor --prometheus 0.0.0.0:0 --prometheus-public -- true >"$out" 2>"$err"
    rc=$?
    [ "$rc" -eq 0 ] || fail "--prometheus-public: status $rc"
    grep -q "^prometheus: http://0.0.0.0:" "$out" || fail "--prometheus-public: no URL"
    for bad in nonsense 127.0.0.1:99999 example.org:80 "::1:80"; do
        "$stoke" monitor --prometheus "$bad" -- true >"$out" 2>"$err"
        rc=$?
        [ "$rc" -ne 0 ] || fail "--prometheus $bad accepted"
        grep -q -- "--prometheus" "$err" || fail "--prometheus $bad: $(cat "$err")"
    done
    ok "bad addresses refused" ;;
*)
    echo "unknown case $case_name"
    exit 2 ;;
esac
exit 0
