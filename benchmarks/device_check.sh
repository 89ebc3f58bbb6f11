#!/usr/bin/env bash
# The GPU checks of --compile and --cudagraphs, for a one-GPU machine that reaches no package
# registry (the packages torch's image lacks travel as wheels). Three phases, each with its time on
# an H100-class machine; run them in one call where the time allows:
#
#   here, with a registry:  bash benchmarks/device_check.sh download        # -> .whl/ (about 40 MB)
#   there:                  bash benchmarks/device_check.sh tests speed peers
#
#   tests  (~3 min)  tests/test_cuda.py: every script on the GPU, exact resume there, checkpoints
#                    across devices, compiled and graph-replayed updates against eager, resume
#                    under --cudagraphs
#   speed  (~6 min)  benchmarks/speed.py devices: each script at its suite cell's settings, one CPU
#                    core against the GPU eager, --compile and --cudagraphs (env steps per second
#                    while learning; compile time is outside that window)
#   peers  (~3 min)  LeanRL's TD3 (--compile --cudagraphs) and DQN (torch.compile) scripts beside
#                    ours on the same GPU, steps per second as each script prints it
#
# Results go to $OUT (the device tool's folder) or ./device_check_out: tests.log, speed.json,
# peers.log, machine.txt. Copy them to benchmarks/results/speed/ with the date and commit, and put
# the figures in docs/speed.md with this command.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-device_check_out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LEANRL=${LEANRL:-../shared/peers/leanrl/leanrl}   # copy it into the tree (e.g. .peers/leanrl) to carry it

if [ "${1:-}" = "download" ]; then
    # the packages beyond torch's GPU image (python 3.12, x86-64); versions as in requirements*.txt
    platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
               --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
    for pkg in gymnasium==1.4.0 farama-notifications tyro==1.0.17 docstring-parser typeguard mujoco glfw pyopengl \
               ale-py==0.12.1 minatar==1.0.15 "tensordict==${TENSORDICT:-0.11.0}" "torchrl==${TORCHRL:-0.11.0}"; do
        $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms \
            -d .whl "$pkg" || echo "download failed: $pkg (the peers phase needs tensordict and torchrl)"
    done
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    du -sh .whl
    exit 0
fi

if [ -d .whl ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export MUJOCO_GL=${MUJOCO_GL:-disable} WANDB_MODE=disabled PYTHONUNBUFFERED=1
{ nvidia-smi -L; nproc; $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))"
  git log -1 --format='%H %cd' 2>/dev/null; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
phases=${*:-tests speed peers}

for phase in $phases; do
    case $phase in
    tests)
        timeout 300 $PY -m pytest -q -x tests/test_cuda.py -p no:cacheprovider 2>&1 | tee "$OUT/tests.log" | tail -5
        ;;
    speed)
        timeout 420 $PY benchmarks/speed.py devices --steps "${STEPS:-6000}" --devices cpu cuda cuda:compile cuda:cudagraphs \
            --out "$OUT/speed.json" 2>&1 | tail -25
        ;;
    peers)
        # LeanRL's scripts import wandb (not in the image) and call wandb.init: a stand-in that does nothing
        mkdir -p /tmp/stub/wandb && echo 'init = log = finish = lambda *a, **k: None' > /tmp/stub/wandb/__init__.py
        for side in "ours_ddpg:$PY algos/ddpg.py --env HalfCheetah-v5 --total-timesteps 12000 --learning-starts 2000 --device cuda --cudagraphs --no-progress --run-dir $OUT/runs" \
                    "leanrl_td3:$PY $LEANRL/td3_continuous_action_torchcompile.py --env-id HalfCheetah-v5 --total-timesteps 12000 --learning-starts 2000 --compile --cudagraphs" \
                    "ours_dqn:$PY algos/dqn.py --env CartPole-v1 --total-timesteps 30000 --learning-starts 5000 --device cuda --cudagraphs --no-progress --run-dir $OUT/runs" \
                    "leanrl_dqn:$PY $LEANRL/dqn_torchcompile.py --env-id CartPole-v1 --total-timesteps 30000 --learning-starts 5000 --compile --cudagraphs"; do
            name=${side%%:*}
            echo "== $name: ${side#*:}" | tee -a "$OUT/peers.log"
            start=$(date +%s.%N)
            PYTHONPATH=/tmp/stub${PYTHONPATH:+:$PYTHONPATH} timeout 150 ${side#*:} > "$OUT/$name.log" 2>&1 \
                || echo "$name failed (exit $?): $(tail -1 "$OUT/$name.log")" | tee -a "$OUT/peers.log"
            echo "$name: wall $(echo "$(date +%s.%N) - $start" | bc) s; last printed rate: $(tr '\r' '\n' < "$OUT/$name.log" \
                | grep -o '[0-9.]* sps' | tail -1)" | tee -a "$OUT/peers.log"
        done
        grep -h '"sps"\|"compile_seconds"\|"updates"' "$OUT"/runs/*/summary.json 2>/dev/null | tr -s ' ' | tee -a "$OUT/peers.log"
        ;;
    *) echo "unknown phase $phase (tests, speed, peers, or download alone)"; exit 2 ;;
    esac
done
