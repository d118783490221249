# The three device calls of 2026-11-27 03:28-03:44 UTC (H200 machine; its host Xeon for every CPU row), from the repository root.
# .dev/ and .whl/ were local, untracked folders carried to the device: .whl/ (and .dev/whl/) held the cp312 wheels of openvino 2026.4.1
# (trimmed to its CPU plugin and ONNX/IR front ends), openvino-telemetry 2025.2.0 and torchao 0.18.0; .dev/fmnist held Debian's Fashion-MNIST IDX files.

# ---- first call: bash .dev/lease.sh (carry .dev .whl)
# #20 on the device's host Xeon (AMX), 16 threads: the current code's best paths against OpenVINO bf16
set -u
L=$OUT/lease.txt
r() { echo "== $(date -u +%T) $*" >> $L; timeout $1 env "${@:2}" >> $L 2>&1; echo "rc $?" >> $L; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >> $L 2>&1 || exit 3
export PYTHONPATH=src:/tmp/site CUDA_VISIBLE_DEVICES= PYTHONUNBUFFERED=1
(lscpu | grep -E "Model name|^CPU\(s\)|Thread|Flags" | sed 's/Flags:.*\(amx[a-z0-9_ ]*\).*/Flags: ... \1 .../'; python3 -c "import torch, openvino, torchao; print(torch.__version__, openvino.__version__, torchao.__version__)"; uptime) >> $L 2>&1
B="python3 -m vitkit benchmark --device cpu --threads 16 --batch 8 --rounds 20"
r 190 $B --model vit_s16 --precision int8-dynamic --compare vitkit:bf16,openvino:bf16 --json $OUT/s16.json
r 210 $B --model vit_b16 --precision int8-dynamic --compare vitkit:bf16,openvino:bf16 --json $OUT/b16.json
uptime >> $L
grep -v "DEBUG\|Warn\|warn" $L | tail -80

# ---- second call: bash .dev/lease2.sh (carry .dev); the two agreement runs ran past their limits (rc 124)
# #20 on the device: agreement with fp32 on all 10,000 Fashion-MNIST test images, on the host Xeon (AMX) at 16 threads,
# of the demo model (1,500 steps) and a 64-px ViT-S/16 (2,000 steps), both trained on the GPU first; then fp32 against ONNX Runtime
set -u
L=$OUT/lease2.txt
r() { echo "== $(date -u +%T) $*" >> $L; timeout $1 env "${@:2}" >> $L 2>&1; echo "rc $?" >> $L; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/whl/*.whl >> $L 2>&1 || exit 3
export PYTHONPATH=src:/tmp/site VITKIT_DATA=$PWD/.dev/fmnist PYTHONUNBUFFERED=1
nvidia-smi -L >> $L
r 70 python3 -m vitkit train --config configs/fashion_mnist.yaml --out /tmp/runs/demo1500 --no-progress train.steps=1500 train.eval_every=1500 train.checkpoint_every=1500
r 130 python3 -m vitkit train --out /tmp/runs/s16_64 --no-progress model.name=vit_s16 model.image_size=64 model.num_classes=10 train.precision=bf16 train.steps=2000 train.batch_size=64 augment.crop=pad augment.pad=4 augment.label_smoothing=0.1 train.warmup_steps=100 train.eval_every=2000 train.checkpoint_every=2000
P="python3 benchmarks/cpu_precision.py --split test --threads 16 --no-nncf --paths"
r 60 CUDA_VISIBLE_DEVICES= $P "vitkit int8-dynamic,vitkit bf16" /tmp/runs/demo1500
r 70 CUDA_VISIBLE_DEVICES= $P "vitkit int8-dynamic,vitkit bf16" /tmp/runs/s16_64
r 95 CUDA_VISIBLE_DEVICES= python3 -m vitkit benchmark --device cpu --threads 16 --batch 8 --rounds 15 --model vit_s16 --precision fp32 --compare onnxruntime:fp32 --json $OUT/s16_fp32.json
grep -v "DEBUG\|Warn\|warn\|^step\|FQN" $L | tail -70

# ---- third call, on the same warm machine
export PYTHONPATH=src:/tmp/site VITKIT_DATA=$PWD/.dev/fmnist PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=; ls /tmp/runs; timeout 105 python3 benchmarks/cpu_precision.py --split test --threads 16 --no-nncf --paths "vitkit int8-dynamic" /tmp/runs/demo1500 2>&1 | grep -v "Warn\|warn\|FQN" | tee $OUT/agree_demo.txt | tail -30
