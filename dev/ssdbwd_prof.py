"""Per-kernel times of one SSD backward (ours, the default configuration)
at b8 L4096 H80 P64 N128 chunk 256 bf16, from torch.profiler (CUPTI):
where the time goes.  Run by dev/ssdbwd.sh with PYTHONPATH=python:bench."""
import torch
from torch.profiler import ProfilerActivity, profile

import gpu_ssd_bwd as g

t, dout = g.inputs(8, 4096, 80, 64, 1, 128, torch.bfloat16)
leaves = {k: v.detach().requires_grad_(True) for k, v in t.items()}
lv = [leaves[k] for k in g.NAMES]
out = g.ours_scan(leaves, 256)
for _ in range(2):
    torch.autograd.grad(out, lv, dout, retain_graph=True)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(3):
        torch.autograd.grad(out, lv, dout, retain_graph=True)
    torch.cuda.synchronize()
tot = {}
for e in prof.events():  # kernels only: the device-side events
    if str(getattr(e, "device_type", "")).endswith("CUDA"):
        tot[e.name] = tot.get(e.name, 0.0) + e.time_range.elapsed_us()
rows = sorted(((k, v / 3 / 1000.0) for k, v in tot.items()), key=lambda r: -r[1])
print(f"kernel {sum(v for _, v in rows):8.3f} ms  all kernels of one backward")
for k, ms in rows[:12]:
    print(f"kernel {ms:8.3f} ms  {k[:90]}")
