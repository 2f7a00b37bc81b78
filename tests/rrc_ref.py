# rrc_ref.py IN OUT: Pillow's results for test_rrc.c (case_pillow). IN: int32 H, W, C,
# OH, OW, NW, RS, CC; an H x W image of C channels (u8: 3 RGB, 1 L); NW windows (int32
# top, left, height, width).
# OUT: each window cropped and resized to OW x OH with Image.BILINEAR (torchvision's
# F.resized_crop on a PIL image), then Resize(RS) + CenterCrop(CC) as torchvision does
# them on a PIL image (the longer side truncated; the margin rounded half to even).
import struct
import sys

from PIL import Image

raw = open(sys.argv[1], "rb").read()
H, W, C, OH, OW, NW, RS, CC = struct.unpack("<8i", raw[:32])
img = Image.frombytes("RGB" if C == 3 else "L", (W, H), raw[32 : 32 + H * W * C])
wins = struct.unpack("<%di" % (4 * NW), raw[32 + H * W * C :])
out = bytearray()
for k in range(NW):
    i, j, h, w = wins[4 * k : 4 * k + 4]
    out += img.crop((j, i, j + w, i + h)).resize((OW, OH), Image.BILINEAR).tobytes()
short, long = (W, H) if W <= H else (H, W)
new_long = int(RS * long / short)
nw, nh = (RS, new_long) if W <= H else (new_long, RS)
r = img.resize((nw, nh), Image.BILINEAR)
top, left = int(round((nh - CC) / 2.0)), int(round((nw - CC) / 2.0))
out += r.crop((left, top, left + CC, top + CC)).tobytes()
open(sys.argv[2], "wb").write(bytes(out))
