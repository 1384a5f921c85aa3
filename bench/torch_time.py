#!/usr/bin/python3
"""Times PyTorch (Debian's python3-torch, 2 threads, eval, no_grad) on one of
scripts/export_models.py's models with its weights and inputs: prints
"torch NAME BATCH median min max" in ms per batch.

  /usr/bin/python3 bench/torch_time.py NAME BATCH REPS
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import export_models  # noqa: E402


def main():
    name, batch, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(2)
    make, chw = export_models.MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    export_models.randomise_batch_norms(model, torch.Generator().manual_seed(1))
    x = torch.rand((batch,) + chw, generator=torch.Generator().manual_seed(2)) * 2 - 1
    times = []
    with torch.no_grad():
        for i in range(reps + 2):
            t0 = time.perf_counter()
            model(x)
            if i >= 2:
                times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    print(f"torch {name} {batch} {times[len(times) // 2]:.3f} {times[0]:.3f} {times[-1]:.3f}")


if __name__ == "__main__":
    main()
