#!/usr/bin/env bash
# Issue 40's GPU measurements (the trial set up on the device) in one run, from the repository root of a machine
# with a GPU, then issue 22's remaining ones when the budget allows:
#   1. the carried wheels (.whl/*.whl: hydra-core, omegaconf, antlr4-python3-runtime, rax) unpacked into $SITE;
#   2. the machine: nvidia-smi, Python, JAX and its devices (stops here unless JAX's backend is a GPU);
#   3. a smoke run (sessions_per_sec.py --smoke), which stops the script if the project does not run;
#   4. benchmarks/sessions_per_sec.py, EBRank at populations 1, 8, 64, 256 (SPS_POPULATIONS), sim.trial_setup host
#      and device per population (sim.click_rng=device in both): wall, every program's seconds, host seconds,
#      set-up and planning, bytes moved to the device per segment (issue 40: wall / program, device / host);
#   5. benchmarks/end_to_end.py --breakdown, one EBRank trial, trial_setup host then device (warm breakdown);
#   6. benchmarks/trial_setup_check.py: EBRank, the 35-member sweep, PDGD and UCBRank-IE, device set-up equal to the
#      host's bit for bit on this backend (CHECK=0: skipped);
#   7. benchmarks/sweep.py, 35 members (5 seeds x 7 epsilon values) with the GPU defaults (trial_setup, click_rng
#      and retrain_examples auto: device on a GPU; fits vmapped in blocks, MEMBER_BATCH): still exact, same epsilon;
#   8. the same sweep with one fit after another (fit.member_batch=1; SWEEP1=1 runs it, default skipped);
#   9. the exactness tests on the GPU (TESTS: tests/test_device_trial.py, tests/test_population.py,
#      tests/test_device_rng.py), at XLA's default optimisation level;
#  10. where a retrain filters its documents (RETRAIN_PRESETS, settings_ab.py; default: skipped) and segment widths
#      phase vs classes (WIDTHS=1; default skipped): issue 22's, measured at a34da24 (docs/results/gpu_h100_a34da24).
# Each step runs under `timeout`, within one budget for the whole script ($BUDGET seconds), so one hang
# cannot eat the machine's time; a step that the budget no longer allows is skipped and said so. Files written to
# $OUT (flat): log.txt (everything) and NAME.{log,json} per step. A step's JSON is its last output line, kept only
# if complete.
#
#   bash benchmarks/gpu_check.sh                     # on the GPU machine (OUT=folder; default /tmp/gpu_check)
#   SMOKE=1 bash benchmarks/gpu_check.sh             # anywhere (minutes on a 2-core CPU): --smoke sizes
#
# Settings (environment): PYTHON (python3), OUT, BUDGET (480 s), SITE (/tmp/site), CACHE (persistent XLA cache,
# /tmp/ltrjax-xla), SPS_QUERIES (1000), SPS_POPULATIONS (1,8,64,256), CHECK (1), MEMBER_BATCH (empty: the backend's
# default), SWEEP (1), SWEEP1 (0), TESTS, RETRAIN_PRESETS (empty), RETRAIN_ROUNDS (2), WIDTHS (0), WIDTHS_PRESET
# (synthetic_mslr30k), WIDTHS_QUERIES (8000), WIDTHS_MEMBERS (8), REQUIRE_GPU (1; 0 with SMOKE=1).
# docs/results/gpu/README.md.
set -u -o pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$PWD
PY=${PYTHON:-python3}
SMOKE=${SMOKE:-0}
OUT=${OUT:-/tmp/gpu_check}
BUDGET=${BUDGET:-480}
SITE=${SITE:-/tmp/site}
CACHE=${CACHE:-/tmp/ltrjax-xla}
SPS_QUERIES=${SPS_QUERIES:-1000}
SPS_POPULATIONS=${SPS_POPULATIONS-1,8,64,256}  # set but empty: skipped
MEMBER_BATCH=${MEMBER_BATCH:-}
SWEEP=${SWEEP:-1}
SWEEP1=${SWEEP1:-0}
CHECK=${CHECK:-1}
TESTS=${TESTS-tests/test_device_trial.py tests/test_population.py tests/test_device_rng.py}
RETRAIN_PRESETS=${RETRAIN_PRESETS-}  # e.g. "synthetic_mq2007 synthetic_mslr30k"; empty: skipped
RETRAIN_ROUNDS=${RETRAIN_ROUNDS:-2}
WIDTHS=${WIDTHS:-0}
WIDTHS_PRESET=${WIDTHS_PRESET:-synthetic_mslr30k}
WIDTHS_QUERIES=${WIDTHS_QUERIES:-8000}
WIDTHS_MEMBERS=${WIDTHS_MEMBERS:-8}
if [ "$SMOKE" = 1 ]; then REQUIRE_GPU=${REQUIRE_GPU:-0}; else REQUIRE_GPU=${REQUIRE_GPU:-1}; fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export LTRJAX_CACHE=${LTRJAX_CACHE:-/tmp/ltrjax-cache}  # generated datasets; the XLA cache is $CACHE
START=$SECONDS
mkdir -p "$OUT" || exit 2

# step NAME LIMIT COMMAND...: run COMMAND under timeout (at most what is left of BUDGET), output to the terminal
# and $OUT/NAME.log; its last output line that parses as a JSON object becomes $OUT/NAME.json
step() {
    local name=$1 limit=$2 rest rc t0
    shift 2
    rest=$((BUDGET - (SECONDS - START)))
    if [ "$limit" -gt "$rest" ]; then limit=$rest; fi
    if [ "$limit" -lt 20 ]; then
        echo "=== $name: SKIPPED, only ${rest}s of the ${BUDGET}s budget left"
        return 124
    fi
    echo "=== $name (limit ${limit}s, $((SECONDS - START))s into the run): $*"
    t0=$SECONDS
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=$?
    echo "=== $name: exit $rc after $((SECONDS - t0))s$([ "$rc" = 124 ] && echo ' (TIMED OUT)')"
    grep '^{' "$OUT/$name.log" | tail -n 1 > "$OUT/$name.json"
    if ! "$PY" -c 'import json, sys; assert isinstance(json.load(open(sys.argv[1])), dict)' "$OUT/$name.json" \
        2> /dev/null; then
        rm -f "$OUT/$name.json"
        echo "=== $name: no complete JSON"
    fi
    return "$rc"
}

main() {
    echo "=== gpu_check.sh: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2> /dev/null || echo '?')" \
         "$(git status --porcelain --untracked-files=no 2> /dev/null | grep -q . && echo '(modified)'), SMOKE=$SMOKE," \
         "budget ${BUDGET}s, OUT=$OUT"

    # 1. the wheels JAX's image lacks: unpacked (pure-Python wheels are zip files; no pip or index needed)
    if compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
        mkdir -p "$SITE" && "$PY" -c '
import sys, zipfile
for wheel in sys.argv[2:]:
    zipfile.ZipFile(wheel).extractall(sys.argv[1])
    print("unpacked", wheel.rsplit("/", 1)[-1])' "$SITE" "$ROOT"/.whl/*.whl || { echo "=== ABORT: wheels"; return 3; }
    else
        echo "no .whl/ folder: the interpreter's own packages are used"
    fi
    export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

    # 2. the machine
    command -v nvidia-smi > /dev/null && { nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version \
        --format=csv,noheader; } || echo "no nvidia-smi"
    echo "cpu cores: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg 2> /dev/null)"
    timeout -k 10 120 "$PY" - "$REQUIRE_GPU" <<'EOF' || { echo "=== ABORT: the environment (above)"; return 3; }
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
missing = []
for name in ("jax", "jaxlib", "flax", "optax", "chex", "numpy", "scipy", "hydra", "omegaconf", "antlr4", "rax",
             "pyarrow", "filelock", "tqdm", "matplotlib", "ltrjax.runner"):
    try:
        module = importlib.import_module(name)
        print(f"  {name:14} {getattr(module, '__version__', '')}  {getattr(module, '__file__', '')}")
    except Exception as e:  # noqa: BLE001
        missing.append(name)
        print(f"  {name:14} MISSING: {type(e).__name__}: {e}")
import jax
print("jax.devices():", jax.devices(), "backend:", jax.default_backend())
if missing:
    sys.exit(f"missing: {missing}")
if sys.argv[1] == "1" and jax.default_backend() != "gpu":
    sys.exit(f"JAX's backend is {jax.default_backend()!r}, not a GPU (REQUIRE_GPU=0 runs anyway)")
EOF

    local smoke=() sps=skipped e2e=0 check=skipped sweep=skipped sweep1=skipped tests=skipped retrain=skipped
    local widths=skipped preset setup
    [ "$SMOKE" = 1 ] && smoke=(--smoke)
    # 3. the smoke run: everything the benchmarks import and compile, at tiny sizes (the backend's defaults)
    step smoke 150 "$PY" benchmarks/sessions_per_sec.py --smoke --families ebrank --reference-sessions 100 --json \
        --cache-dir "$CACHE" \
        || { echo "=== ABORT: the smoke run failed (above); nothing else was run"; return 4; }

    # 4. sessions per second, trials set up on the host and on the device (at --smoke: populations 1, 2)
    if [ -n "$SPS_POPULATIONS" ]; then
        step sessions_per_sec 240 "$PY" benchmarks/sessions_per_sec.py ${smoke[@]+"${smoke[@]}"} --families ebrank \
            --populations "$SPS_POPULATIONS" --queries "$SPS_QUERIES" --repeats 1 --reference-sessions 5000 \
            --trial-setups host,device --progress-json --cache-dir "$CACHE" sim.click_rng=device
        sps=$?
    fi
    # 5. one whole EBRank trial, cold, then where a warm run's wall goes; host then device set-up
    for setup in host device; do
        step "end_to_end_$setup" 120 "$PY" benchmarks/end_to_end.py ${smoke[@]+"${smoke[@]}"} --json --breakdown \
            --cache-dir "$CACHE" sim.click_rng=device "sim.trial_setup=$setup" || e2e=1
    done
    # 6. the device set-up equal to the host's on this backend (35-member sweep; at --smoke 2 seeds x 2 values)
    if [ "$CHECK" = 1 ]; then
        step trial_setup_check 240 "$PY" benchmarks/trial_setup_check.py ${smoke[@]+"${smoke[@]}"} --json \
            --cache-dir "$CACHE"
        check=$?
    fi
    # 7. the sweep with the backend's defaults (at --smoke: 2 seeds x 2 values, 60 queries)
    if [ "$SWEEP" = 1 ]; then
        step sweep 240 "$PY" benchmarks/sweep.py ${smoke[@]+"${smoke[@]}"} \
            ${MEMBER_BATCH:+--member-batch "$MEMBER_BATCH"} --cache-dir "$CACHE"
        sweep=$?
    fi
    # 8. the same with one fit after another
    if [ "$SWEEP1" = 1 ]; then
        step sweep_member_batch1 240 "$PY" benchmarks/sweep.py ${smoke[@]+"${smoke[@]}"} --member-batch 1 \
            --cache-dir "$CACHE"
        sweep1=$?
    fi
    # 9. exactness on this backend (device set-up, population = members, device clicks)
    if [ -n "$TESTS" ]; then
        # shellcheck disable=SC2086  # TESTS is a list of paths
        step tests 200 env LTRJAX_TEST_XLA_OPT=default LTRJAX_TEST_XLA_CACHE="$CACHE-tests" "$PY" -m pytest \
            -p no:cacheprovider -n 4 -q $TESTS
        tests=$?
    fi
    # 10. issue 22's: a retrain's document filter host or device, and segment widths phase or classes
    if [ -n "$RETRAIN_PRESETS" ]; then
        retrain=0
        for preset in $RETRAIN_PRESETS; do
            step "retrain_$preset" 240 "$PY" benchmarks/settings_ab.py sim.retrain_examples device,host \
                ${smoke[@]+"${smoke[@]}"} --json --preset "$preset" --rounds "$RETRAIN_ROUNDS" --cache-dir "$CACHE" \
                || retrain=1
        done
    fi
    if [ "$WIDTHS" = 1 ]; then
        step widths 240 "$PY" benchmarks/settings_ab.py sim.segment_widths phase,classes ${smoke[@]+"${smoke[@]}"} \
            --json --preset "$WIDTHS_PRESET" --queries "$WIDTHS_QUERIES" --members "$WIDTHS_MEMBERS" --rounds 2 \
            --cache-dir "$CACHE"
        widths=$?
    fi

    echo "=== summary ($((SECONDS - START))s; exit codes: sessions_per_sec $sps, end_to_end $e2e," \
         "trial_setup_check $check, sweep $sweep, sweep_member_batch1 $sweep1, tests $tests, retrain $retrain," \
         "widths $widths)"
    "$PY" - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    path = out / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None
s = load("sessions_per_sec")
if s:
    print("sessions_per_sec:", s.get("backend"), s.get("device_kind"), "jax", s.get("jax_version"),
          "click_rng", s.get("click_rng"), "queries", s.get("queries"))
    for family, rates in s["families"].items():
        for p in rates:
            for setup, d in s["detail"][family][p]["by_trial_setup"].items():
                print(f"  {family} x{p} {setup}: wall {d['wall_sessions_per_sec']:,.0f} sessions/s, program "
                      f"{d['program_sessions_per_sec'] or 0:,.0f}; wall / program "
                      f"{d['wall_seconds'] / max(d['program_seconds'], 1e-9):.2f}, host {d['host_seconds']:.3f} s, "
                      f"{d['h2d_bytes_per_segment']:,.0f} B/segment to the device")
        head = s["detail"][family]
        for p in head:
            by = head[p]["by_trial_setup"]
            if "host" in by and "device" in by:
                print(f"  {family} x{p}: wall sessions/s device / host "
                      f"{by['device']['wall_sessions_per_sec'] / by['host']['wall_sessions_per_sec']:.2f}")
    print("  reference (NumPy loop):", s.get("reference_sessions_per_sec"))
for setup in ("host", "device"):
    e = load(f"end_to_end_{setup}")
    if e:
        print(f"end_to_end {setup}: run {e['run_seconds']:.2f} s (compile {e['compile_seconds']}), cum {e['cum_ndcg']};",
              {k: v for k, v in e["warm_breakdown"].items() if k != "program_parts"})
c = load("trial_setup_check")
if c:
    print("trial_setup_check: equal", c["equal"], {k: (v["equal"], v.get("same_choice")) for k, v in c["cases"].items()})
for name in ("sweep", "sweep_member_batch1"):
    w = load(name)
    if w:
        keys = ("members", "member_batch", "click_rng", "population_seconds", "serial_seconds", "speedup",
                "speedup_excluding_compile", "population_compile_seconds", "serial_compile_seconds", "max_abs_diff",
                "same_choice", "chunks", "backend", "device_kind")
        print(f"{name}:", {k: w.get(k) for k in keys})
for path in sorted(out.glob("retrain_*.json")) + sorted(out.glob("widths.json")):
    r = json.loads(path.read_text())
    print(f"{path.stem}: {r['key']} {r['values']}, {r['members']} member(s), same results {r['same_results']}",
          f"(max abs diff {r['max_abs_diff']:.1e});",
          "median s", {v: {k: round(x, 2) for k, x in m.items()} for v, m in r["median"].items()},
          "over the first", {v: {k: None if x is None else round(x, 3) for k, x in m.items()}
                             for v, m in r["over_first"].items()})
EOF
    [[ "$sps" =~ ^(0|skipped)$ ]] && [ "$e2e" = 0 ] && [[ "$check" =~ ^(0|skipped)$ ]] \
        && [[ "$sweep" =~ ^(0|skipped)$ ]] && [[ "$sweep1" =~ ^(0|skipped)$ ]] && [[ "$tests" =~ ^(0|skipped)$ ]] \
        && [[ "$retrain" =~ ^(0|skipped)$ ]] && [[ "$widths" =~ ^(0|skipped)$ ]]
}

main "$@" 2>&1 | tee "$OUT/log.txt"
