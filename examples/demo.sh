#!/bin/sh
# The main job: export a real torchvision model from PyTorch, check it, run it with
# coil and compare the result (and the time) with PyTorch eager.
set -e
B=${B:-build}
COIL=$B/coil
MODEL=${MODEL:-torchvision:resnet18}
OUT=${OUT:-$B/demo}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1

echo "== export $MODEL with make_fx (PyTorch $($PY -c 'import torch; print(torch.__version__)'))"
COIL=$COIL $PY client/python/coil_export.py "$MODEL" "$OUT"
echo "== validate, hash, describe"
$COIL validate "$OUT/graph.json"
echo "graph hash: $($COIL hash "$OUT/graph.json")"
$COIL info "$OUT/graph.json" | head -n 20
echo "== run with coil's reference interpreter"
t0=$(date +%s%N)
$COIL eval "$OUT/graph.json" -w "$OUT/weights.safetensors" -i "$OUT/inputs.safetensors" -o "$OUT/coil.safetensors"
t1=$(date +%s%N)
echo "== compare with PyTorch eager"
$PY examples/compare.py "$OUT/outputs.safetensors" "$OUT/coil.safetensors"
eager=$($PY examples/eager_latency.py "$MODEL" 1)
printf 'latency, 1 thread: coil interpreter %d ms (whole process), PyTorch eager %s ms\n' \
	$(( (t1 - t0) / 1000000 )) "$eager"
