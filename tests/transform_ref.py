# transform_ref.py IN OUT: torch's results for test_transform.c (case_torch): pad 3 +
# 10x9 crop at (2, 5) + horizontal flip + ImageNet normalize, a bilinear resize to
# 20x7 (align_corners=False, no antialias), and casts to float16 and bfloat16.
import sys

import numpy as np
import torch
import torch.nn.functional as F

H, W, C = 13, 11, 3
raw = open(sys.argv[1], "rb").read()
img = np.frombuffer(raw[: H * W * C], dtype=np.uint8).reshape(H, W, C)
vals = np.frombuffer(raw[H * W * C :], dtype=np.float32)
x = torch.from_numpy(img.copy()).permute(2, 0, 1).float().div(255)  # ToTensor: CHW
padded = F.pad(x, (3, 3, 3, 3), value=0.0)
crop = padded[:, 2 : 2 + 10, 5 : 5 + 9].flip(-1)
mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
crop = (crop - mean) / std
res = F.interpolate(x.unsqueeze(0), size=(20, 7), mode="bilinear", align_corners=False)[0]
t = torch.from_numpy(vals.copy())
with open(sys.argv[2], "wb") as f:
    f.write(crop.contiguous().numpy().astype(np.float32).tobytes())
    f.write(res.contiguous().numpy().astype(np.float32).tobytes())
    f.write(t.half().view(torch.int16).numpy().tobytes())
    f.write(t.bfloat16().view(torch.int16).numpy().tobytes())
