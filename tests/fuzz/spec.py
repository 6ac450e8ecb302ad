"""What the driver needs to know about the targets without importing fastdecode
(the driver itself runs without the sanitizer runtime the fuzz build needs)."""

TARGET_NAMES = ("read_header", "decode_jpeg", "decode_bmp", "decode_image", "adjust_colors",
                "augment", "wds_handler", "detached_plan", "dataset_item", "raster",
                "decode_png", "decode_webp")
# Targets whose input ends with an option trailer of TRAILER bytes.
TAKES_OPTIONS = frozenset({"decode_jpeg", "decode_bmp", "decode_image", "wds_handler",
                           "detached_plan", "dataset_item", "decode_png", "decode_webp"})
TRAILER = 12
