# The four device calls of 2026-11-26 12:32-12:44 UTC, as run from the repository root on the H200 machine's host.
# .dev/ was a local, untracked folder carried to the device: .dev/fault.py is fault.py beside this file (before its
# docstring was added), and .dev/install.sh unpacked the carried wheels (openvino, onnx, torchao) into /tmp/site.
# The fourth call: python3 -m vitkit benchmark --device cpu --threads 16 --batch 8 --model vit_s16 --precision bf16
#   --compile off --rounds 5 --compare openvino:bf16,vitkit:int8-dynamic --json $OUT/s16e.json

#!/bin/bash
# 2026-11-26 lease: compiled bf16 ViT-S/16 fault at 16 threads; one variant per process, results to $OUT/fault.txt as they come
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES=
python3 -c "import torch; print(torch.__version__, torch.__config__.parallel_info())" > $OUT/fault.txt 2>&1
r() { echo "== $(date -u +%T) $*" >> $OUT/fault.txt; timeout $1 env "${@:2}" >> $OUT/fault.txt 2>&1; echo "rc $?" >> $OUT/fault.txt; }
r 40 python3 .dev/fault.py eager
r 110 python3 .dev/fault.py compiled
r 110 OMP_WAIT_POLICY=PASSIVE python3 .dev/fault.py compiled
r 110 python3 .dev/fault.py no_cpp_wrapper
grep -v Warn $OUT/fault.txt | grep "ms "
#!/bin/bash
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES=
r() { echo "== $(date -u +%T) $*" >> $OUT/l2.txt; timeout $1 env "${@:2}" >> $OUT/l2.txt 2>&1; echo "rc $?" >> $OUT/l2.txt; }
r 30 OMP_WAIT_POLICY=PASSIVE python3 .dev/fault.py eager
r 30 OMP_WAIT_POLICY=PASSIVE MODEL=vit_b16 python3 .dev/fault.py eager
r 100 OMP_WAIT_POLICY=PASSIVE MODEL=vit_b16 python3 .dev/fault.py compiled
echo "== $(date -u +%T) bench" >> $OUT/l2.txt
OMP_WAIT_POLICY=PASSIVE timeout 150 python3 -m vitkit benchmark --device cpu --threads 16 --batch 8 --model vit_s16 --precision bf16 --rounds 5 --compare openvino:bf16 --json $OUT/s16p.json > $OUT/s16p.txt 2>&1; echo "rc $?" >> $OUT/l2.txt
grep "ms \|rc" $OUT/l2.txt; tail -15 $OUT/s16p.txt
#!/bin/bash
source .dev/install.sh; export PYTHONPATH=src:$S CUDA_VISIBLE_DEVICES=
r() { echo "== $(date -u +%T) $*" >> $OUT/l3.txt; timeout $1 env "${@:2}" >> $OUT/l3.txt 2>&1; echo "rc $?" >> $OUT/l3.txt; }
r 25 GOMP_SPINCOUNT=10000 python3 .dev/fault.py eager
r 85 GOMP_SPINCOUNT=10000 python3 .dev/fault.py compiled
r 85 TORCHINDUCTOR_CPP_DYNAMIC_THREADS=1 python3 .dev/fault.py compiled
grep "ms \|rc\|==" $OUT/l3.txt
