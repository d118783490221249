# The five device calls of 2026-11-26 14:27-14:43 UTC (H200 machine; its host CPU for the CPU rows), from the repository root.
# .dev/ was a local, untracked folder carried to the device: .dev/fault.py was benchmarks/cpu_xeon16/omp_wait/fault.py, .dev/packed.py is packed.py beside this file;
# .dev/install.sh unpacked the carried wheels (openvino, onnx, torchao) into /tmp/site ($S).

# ---- .dev/lease4.sh
# GPU first: the runner's CUDA timings (new gpu test) and the GPU time estimate; then #20 on the host's Xeon: OpenMP thread pinning
set -u
L=$OUT/l4.txt
r() { echo "== $(date -u +%T) $*" >> $L; timeout $1 env "${@:2}" >> $L 2>&1; echo "rc $?" >> $L; }
export PYTHONPATH=src
nvidia-smi -L >> $L; python3 -c "import torch; print(torch.__version__)" >> $L
r 150 python3 -m pytest tests/test_gpu.py -q -x -p no:cacheprovider -k "choosing_its_path or benchmark_on_cuda"
r 100 python3 -m vitkit train --out /tmp/est --no-progress model.name=vit_b16 data.name=synthetic data.synthetic_size=4096 data.synthetic_classes=1000 train.batch_size=256 train.compile=false train.steps=120 train.log_every=20 train.eval_every=100000 train.checkpoint_every=100000 augment.crop=pad augment.pad=4 train.warmup_steps=10
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES=
r 30 python3 .dev/fault.py eager
r 30 OMP_PROC_BIND=close OMP_PLACES=cores python3 .dev/fault.py eager
r 110 OMP_PROC_BIND=close OMP_PLACES=cores python3 .dev/fault.py compiled
r 50 python3 .dev/fault.py compiled
r 30 PROFILE=1 python3 .dev/fault.py eager
grep "ms \|rc\|==\|passed\|failed\|estimate\|plan\|img/s" $L | grep -v Warn | head -60

# ---- .dev/lease5.sh
set -u
L=$OUT/l5.txt
r() { echo "== $(date -u +%T) $*" >> $L; timeout $1 env "${@:2}" >> $L 2>&1; echo "rc $?" >> $L; }
export PYTHONPATH=src
r 120 python3 -m pytest tests/test_gpu.py -q -x -p no:cacheprovider -k "choosing_its_path"
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES=
r 150 python3 .dev/packed.py vit_s16 vit_b16
grep -v "DEBUG\|Warn" $L | grep "ms \|rc \|==\|passed\|failed\|calls\|Error" | head -40

# ---- .dev/lease6.sh
set -u
L=$OUT/l6.txt
r() { echo "== $(date -u +%T) $*" >> $L; timeout $1 env "${@:2}" >> $L 2>&1; echo "rc $?" >> $L; }
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES= SKIP_SHAPES=1
r 40 python3 .dev/packed.py vit_s16
r 40 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 python3 .dev/packed.py vit_s16
r 40 OMP_WAIT_POLICY=PASSIVE python3 .dev/packed.py vit_s16
r 40 T=12 python3 .dev/packed.py vit_s16
r 40 T=8 python3 .dev/packed.py vit_s16
for q in plain packed; do QUICK=$q ONEDNN_VERBOSE=1 timeout 40 python3 .dev/packed.py vit_s16 > $OUT/verbose_$q.txt 2>&1
awk -v q=$q '/exec/{n=split($0,a,","); print q, a[6], a[7], a[n-1]}' $OUT/verbose_$q.txt | sort | uniq -c | head -20; done
grep -v "DEBUG\|Warn" $L | grep "ms \|rc \|==\|Error" | head -40

# ---- .dev/lease7.sh
set -u
L=$OUT/l7.txt
r() { echo "== $(date -u +%T) $*" >> $L; timeout $1 env "${@:2}" >> $L 2>&1; echo "rc $?" >> $L; }
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES=
r 25 python3 .dev/fault.py eager
r 100 python3 .dev/fault.py no_prepack
r 25 python3 .dev/fault.py eager
r 25 MODEL=vit_b16 python3 .dev/fault.py eager
r 110 MODEL=vit_b16 python3 .dev/fault.py no_prepack
grep -v "DEBUG\|Warn" $L | grep "ms \|rc \|==\|Error" | head -40

# ---- fifth call: vitkit's compiled bf16 without weight packing, against OpenVINO (the switch was a temporary environment
# variable, VITKIT_NO_PREPACK; the same setting is now vitkit's default for bf16 on AMX, precision._inference_settings)
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES= VITKIT_NO_PREPACK=1; timeout 175 python3 -m vitkit benchmark --device cpu --threads 16 --batch 8 --model vit_s16 --precision bf16 --compile on --rounds 3 --compare openvino:bf16 --json $OUT/s16_noprepack.json
