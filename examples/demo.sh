#!/bin/sh
# The main job: export a real torchvision model from PyTorch, compile it through
# coil's cache, run it, compare with PyTorch eager (output and latency), then run it
# again to show the cache hit.
set -e
B=${B:-build}
COIL=$B/coil
MODEL=${MODEL:-torchvision:resnet18}
OUT=${OUT:-$B/demo}
THREADS=${THREADS:-1}
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1
export COIL_CACHE_DIR=${COIL_CACHE_DIR:-$OUT/cache}
rm -rf "$COIL_CACHE_DIR"

echo "== export $MODEL with make_fx (PyTorch $($PY -c 'import torch; print(torch.__version__)'))"
COIL=$COIL $PY client/python/coil_export.py "$MODEL" "$OUT"
$COIL validate "$OUT/graph.json"
echo "graph hash: $($COIL hash "$OUT/graph.json")"

for run in 1 2; do
	echo "== coil run #$run (cache: $COIL_CACHE_DIR)"
	$COIL run "$OUT/graph.json" -w "$OUT/weights.safetensors" -i "$OUT/inputs.safetensors" \
		-o "$OUT/coil.safetensors" --threads "$THREADS" --repeat 20 2>"$OUT/run.log"
	cat "$OUT/run.log"
done
echo "== compare with PyTorch eager"
$PY examples/compare.py "$OUT/outputs.safetensors" "$OUT/coil.safetensors"
coil_ms=$(sed -n 's/.*run \([0-9.]*\) ms.*/\1/p' "$OUT/run.log")
eager_ms=$($PY examples/eager_latency.py "$MODEL" "$THREADS")
echo "latency, $THREADS thread(s), median of 20: coil $coil_ms ms, PyTorch eager $eager_ms ms"
$COIL cache stats | sed 's/^/cache: /'
