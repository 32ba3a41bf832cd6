"""Median eager latency of a torchvision model on the exporter's sample input.
usage: /usr/bin/python3 examples/eager_latency.py MODEL_SPEC THREADS"""
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "python"))
import torch  # noqa: E402
import coil_export  # noqa: E402

torch.set_num_threads(int(sys.argv[2]))
module, inputs = coil_export.make_model(sys.argv[1])
module.eval()
with torch.no_grad():
    for _ in range(3):
        module(*inputs)
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        module(*inputs)
        ts.append(time.perf_counter() - t0)
print("%.2f" % (sorted(ts)[len(ts) // 2] * 1e3))
