#!/usr/bin/env bash
# The GPU checks of --compile and --cudagraphs, made for one call of the device tool: one GPU, a torch
# image, no package registry (the packages the image lacks travel as wheels, LeanRL's scripts as files).
#
#   here:   bash benchmarks/device_check.sh download   # wheels -> .whl/, LeanRL -> .peers/leanrl/, sizes
#           bash benchmarks/device_check.sh slim       # benchmarks/results/ (most of the tree) kept back
#   there:  bash benchmarks/device_check.sh [STEP...]  # carry .whl and .peers, timeout_s 600
#   here:   bash benchmarks/device_check.sh unslim     # benchmarks/results/ back as committed: do this
#                                                      # before any commit, which would delete it
#
# The steps run in this order, the most wanted first. Each is cut to what is left of BUDGET seconds
# (default 540) and skipped when less than its minimum is left; name steps to run only those, e.g. in a
# second call for what the first skipped. Speed figures come from benchmarks/speed.py devices (env steps
# per wall second while learning, compile time outside it; one torch thread; the CPU runs of a cell
# beside its GPU runs, one GPU run at a time).
#   ddpg        DDPG HalfCheetah-v5: one CPU core, GPU eager, --cudagraphs, --compile
#   leanrl_td3  LeanRL's TD3 HalfCheetah-v5 --compile --cudagraphs (its defaults), the same steps
#   pixels      DQN MinAtar Breakout and Atari Breakout: one CPU core, GPU eager, --cudagraphs
#   tests       tests/test_cuda.py on 8 workers
#   vectors     DQN CartPole-v1, NAF HalfCheetah-v5, A2C HalfCheetah-v5, n-step Q and SARSA CartPole-v1:
#               one CPU core, GPU eager, --cudagraphs
#   leanrl_dqn  LeanRL's DQN CartPole-v1 --compile --cudagraphs, the steps of ours in `vectors`
#   compile     --compile alone on the GPU for the cells of pixels and vectors
#   learn       dqn, a2c and ddpg with --cudagraphs, seed 1, their defaults (the defaults suite's cells), side
#               by side for the rest of the budget: their greedy evals against the eager seeds' spread
# Out: $OUT (the device tool's folder, else ./device_check_out) gets summary.txt (all that the steps
# printed) and device_check.tgz (every log, JSON record and run folder). Put the raw files in
# benchmarks/results/speed/ and the figures in docs/speed.md with the date, commit and this command.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-device_check_out}
PY=${PYTHON:-python3}
LEANRL=.peers/leanrl
EXCLUDE=$(git rev-parse --git-path info/exclude 2>/dev/null)
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
travelling() {  # MiB of what the device tool sends: tracked and not-ignored files, and the carried folders
    { git ls-files -z --cached --others --exclude-standard; find .whl .peers -type f -print0 2>/dev/null; } \
        | du -cb --files0-from=- 2>/dev/null | tail -1 | awk '{printf "%.1f", $1 / 1048576}'
}

case "${1:-}" in
download)
    # beyond the torch image (python 3.12, x86-64): versions as in requirements*.txt; tensordict and
    # torchrl (LeanRL's) of torch 2.11's time, with what they import
    for pkg in gymnasium==1.4.0 farama-notifications tyro==1.0.17 docstring-parser typeguard mujoco==4.0.0 \
               mujoco-core==4.0.0 glfw pyopengl ale-py==0.12.1 minatar==1.0.15 "tensordict==${TENSORDICT:-0.12.4}" \
               "torchrl==${TORCHRL:-0.12.0}" pyvers==0.2.3 orjson; do
        $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
            -d .whl "$pkg" 2>&1 | grep -v "is ignored" || true
    done
    mkdir -p $LEANRL && cp ../shared/peers/leanrl/LICENSE ../shared/peers/leanrl/leanrl/*_torchcompile.py $LEANRL/
    for p in /.whl/ /.peers/; do grep -qx "$p" "$EXCLUDE" 2>/dev/null || echo "$p" >> "$EXCLUDE"; done
    echo "$(ls .whl | wc -l) wheels; travels: $(travelling) MiB of the tool's 64 (\`slim\` keeps benchmarks/results/ back)"
    exit 0 ;;
slim)
    [ -e .slim_results ] && { echo "already slim: .slim_results/ holds benchmarks/results/"; exit 1; }
    git rm -r -q --cached benchmarks/results && mv benchmarks/results .slim_results
    grep -qx /.slim_results/ "$EXCLUDE" || echo /.slim_results/ >> "$EXCLUDE"
    echo "travels: $(travelling) MiB; run \`unslim\` after the call, before any commit"
    exit 0 ;;
unslim)
    [ -d .slim_results ] && [ ! -e benchmarks/results ] && mv .slim_results benchmarks/results
    git reset -q -- benchmarks/results && git status --short benchmarks/results | head -5
    exit 0 ;;
esac

STEPS="ddpg leanrl_td3 pixels tests vectors leanrl_dqn compile learn"
for step in "$@"; do
    [[ " $STEPS " == *" $step "* ]] || { echo "unknown step $step: $STEPS (download, slim, unslim alone)"; exit 2; }
done
W=$(mktemp -d /tmp/device_check.XXXX)
mkdir -p "$OUT"
PEER_WHEELS="tensordict|torchrl|pyvers|orjson"  # LeanRL's alone, in their own folder: torchrl's wheel has a
if [ -d .whl ]; then                            # top-level package named benchmarks
    install() { $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
    install /tmp/site $(ls .whl/*.whl | grep -Ev "$PEER_WHEELS") && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    install /tmp/stub $(ls .whl/*.whl | grep -E "$PEER_WHEELS")
fi
# LeanRL's scripts import wandb and call wandb.init: a stand-in that does nothing
mkdir -p /tmp/stub/wandb && echo 'init = log = finish = lambda *a, **k: None' > /tmp/stub/wandb/__init__.py
export MUJOCO_GL=${MUJOCO_GL:-disable} WANDB_MODE=disabled PYTHONUNBUFFERED=1
DEADLINE=${BUDGET:-540}  # seconds from the start of this script (bash counts them in SECONDS)
{ nvidia-smi -L; echo "$(nproc) CPUs"; $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
  git log -1 --format='commit %H %cd' 2>/dev/null; git status --short | grep -v '^D ' | head -5; } 2>&1 | tee "$W/machine.txt"
chosen=${*:-$STEPS}

run_step() {  # NAME MIN_SECONDS CAP_SECONDS COMMAND...: the command under timeout, its output in $W/NAME.log
    local name=$1 min=$2 cap=$3; shift 3
    local left=$((DEADLINE - SECONDS))
    if [ $left -lt "$min" ]; then echo "== $name: skipped, ${left} s left"; return; fi
    echo "== $name ($(date +%T), limit $((cap < left ? cap : left)) s): $*"
    timeout -k 20 $((cap < left ? cap : left)) "$@" > "$W/$name.log" 2>&1; local rc=$?  # KILL 20 s after an unheeded TERM
    tr '\r' '\n' < "$W/$name.log" | grep -v '^\s*$' | tail -${TAIL:-14}
    [ $rc -eq 0 ] || echo "== $name: exit $rc$([ $rc -eq 124 ] && echo ' (its time ran out)')"
}
speed() {  # NAME STEPS "DEVICES" CELL...: speed.py devices, one invocation and JSON record per cell (a cell cut
    local name=$1 steps=$2 devices=$3 cell tag; shift 3  # off by the time limit loses its own figures alone)
    for cell in "$@"; do
        tag=${name}_$(echo "$cell" | cut -d: -f2,3 | tr ':/' '__')
        TAIL=5 run_step "$tag" 45 200 $PY benchmarks/speed.py devices --steps "$steps" --cells "$cell" --devices $devices \
            --out "$W/speed_$tag.json"
    done
}
leanrl() {  # NAME SCRIPT FLAGS...: LeanRL's script, unmodified; the rate is the last its progress bar printed.
    # Its DQN reads the global `desc` before any episode sets it (gymnasium 1.x gives no final_info): desc = ""
    local name=$1 script=$2; shift 2
    PYTHONPATH=/tmp/stub${PYTHONPATH:+:$PYTHONPATH} TAIL=2 run_step "$name" 60 150 $PY -c "import runpy, sys; \
sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], {'desc': ''}, '__main__')" $LEANRL/$script "$@" --compile --cudagraphs
    [ -f "$W/$name.log" ] && echo "$name: last printed rate $(tr '\r' '\n' < "$W/$name.log" | grep -o '[0-9.]* sps' | tail -1)"
}
VECTORS="classic:dqn:CartPole-v1 mujoco:naf:HalfCheetah-v5"
ON_POLICY="mujoco:a2c:HalfCheetah-v5 classic:n_step_q:CartPole-v1 classic:sarsa:CartPole-v1"
PIXELS="minatar_paper:dqn:MinAtar/Breakout-v0 atari_cpu:dqn:BreakoutNoFrameskip-v4"

for step in $chosen; do
    case $step in
    ddpg) speed ddpg 4000 "cpu cuda cuda:cudagraphs" mujoco:ddpg:HalfCheetah-v5
          speed compile 4000 cuda:compile mujoco:ddpg:HalfCheetah-v5 ;;
    leanrl_td3) leanrl leanrl_td3 td3_continuous_action_torchcompile.py --env-id HalfCheetah-v5 --total-timesteps 4000 \
                    --learning-starts 1000 ;;
    pixels) speed pixels 4000 "cpu cuda cuda:cudagraphs" $PIXELS ;;
    tests) run_step tests 90 300 $PY -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider ;;
    vectors) speed vectors 8000 "cpu cuda cuda:cudagraphs" $VECTORS
             speed vectors 60000 "cpu cuda cuda:cudagraphs" $ON_POLICY ;;
    leanrl_dqn) leanrl leanrl_dqn dqn_torchcompile.py --env-id CartPole-v1 --total-timesteps 8000 --learning-starts 2000 ;;
    compile) speed compile 4000 cuda:compile $PIXELS
             speed compile 8000 cuda:compile $VECTORS
             speed compile 60000 cuda:compile $ON_POLICY ;;
    learn)  # side by side on the GPU, stopped (SIGINT: a checkpoint and summary.json) when the time is up
        left=$((DEADLINE - SECONDS - 10))
        if [ $left -lt 60 ]; then echo "== learn: skipped, $((left + 10)) s left"; continue; fi
        echo "== learn ($(date +%T), limit $left s): dqn, a2c and ddpg --seed 1 --device cuda --cudagraphs"
        for algo in dqn a2c ddpg; do
            timeout -s INT -k 20 $left $PY algos/$algo.py --seed 1 --device cuda --cudagraphs --no-progress --run-dir "$W/learn" \
                > "$W/learn_$algo.log" 2>&1 &
        done
        wait
        for f in "$W"/learn/*/summary.json; do [ -f "$f" ] && $PY -c "import json, sys; s = json.load(open(sys.argv[1]))
print(f\"learn: {s['algo']} {s['env']}: {'done' if s['completed'] else 'stopped'} at {s['total_timesteps']} steps, greedy \"
      f\"eval {s.get('eval_return_mean')}, compile {s.get('compile_seconds')} s\")" "$f"; done ;;
    esac
done 2>&1 | tee "$OUT/summary.txt"
cp "$OUT/summary.txt" "$W/"
tar czf "$OUT/device_check.tgz" -C "$W" --exclude='*.pt' . && ls -la "$OUT"
