#!/usr/bin/env bash
# CPU seconds of tests/pipeline/test_demo_learning.py's demo_run fixture, stage by stage: the fixture's three
# Snakemake calls (same targets, same config files, ATEN_CPU_CAPABILITY=default for seed 2) split by target, each
# under /usr/bin/time (user + sys of Snakemake and the jobs it waited for), with OMP_WAIT_POLICY=PASSIVE and a JAX
# compilation cache as tests/conftest.py sets them for the suite. CPU seconds, not wall time: the suite's two
# xdist workers keep both cores busy, so what a fixture saves in CPU is what the suite saves in time (halved).
#
#   bash benchmarks/learning_fixture_cpu.sh [WORKDIR] [EXTRA_CONFIG ...]     # prints WORKDIR/stages.txt
#
# An EXTRA_CONFIG goes after the fixture's files (e.g. one with `defaults: {grpo: {max_checkpoints_to_keep: null}}`
# to keep every checkpoint for a look at earlier steps; it changes no training setting).
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
wd=${1:-$(mktemp -d /tmp/learning-cpu.XXXXXX)}
shift || true
mkdir -p "$wd"
ln -sfn "$repo/config" "$wd/config"
ln -sfn "$repo/data" "$wd/data"
export OMP_WAIT_POLICY=PASSIVE JAX_COMPILATION_CACHE_DIR="$wd/.jax-cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
export PYTHONPATH="$repo/src:$repo/tests" PATH="$repo/.venv/bin:$PATH"
trl=(--configfile "$repo/config/config.yaml" "$repo/tests/pipeline/learning.yaml" "$@")
both=("${trl[@]}" "$repo/config/demo-tunix.yaml")
out="$wd/stages.txt"
: >"$out"

stage() {
  local name=$1
  shift
  /usr/bin/time -f "$name: user %U s, sys %S s, wall %e s, max RSS %M kB" -a -o "$out" \
    env "$@" >"$wd/$name.log" 2>&1 || echo "$name: FAILED (see $wd/$name.log)" >>"$out"
}
sm=("$repo/.venv/bin/snakemake" -s "$repo/Snakefile" -d "$wd" --profile "$repo/profiles/local")
cd "$wd"
# The fixture's first call.
stage sft "${sm[@]}" results/tiny-arith-seed1/sft.json "${both[@]}"
stage eval-sft "${sm[@]}" results/tiny-arith-sft/eval/arith.json "${both[@]}"
stage trl-seed1 "${sm[@]}" results/tiny-arith-seed1/training_complete.json "${both[@]}"
stage eval-trl-seed1 "${sm[@]}" results/tiny-arith-seed1/eval/arith.json "${both[@]}"
stage tunix-seed1 "${sm[@]}" results/tiny-arith-tunix-seed1/training_complete.json "${both[@]}"
stage eval-tunix-seed1 "${sm[@]}" results/tiny-arith-tunix-seed1/eval/arith.json "${both[@]}"
# Its second call: TRL seed 2 under torch's generic kernels.
stage trl-seed2-generic ATEN_CPU_CAPABILITY=default "${sm[@]}" results/tiny-arith-seed2/training_complete.json "${trl[@]}"
stage eval-trl-seed2-generic ATEN_CPU_CAPABILITY=default "${sm[@]}" results/tiny-arith-seed2/eval/arith.json "${trl[@]}"
# Its third: the report, the uploads' records, the GSM8K-sample evaluations.
stage rest "${sm[@]}" "${trl[@]}"
cat "$out"
