"""Build the optional C extensions (JPEG region decode + crop-resize, patchify); the rest is in
pyproject.toml.

`optional=True`: without libjpeg headers the build is skipped and datapipe decodes with PIL
alone (slower for random crops, same results within rounding).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("datapipe.image._jpeg",
                             sources=["datapipe/image/_jpeg.c", "datapipe/image/resample.c",
                                      "datapipe/image/ycc.c"],
                             depends=["datapipe/image/resample.h", "datapipe/image/ycc.h"],
                             libraries=["jpeg"], optional=True,
                             extra_compile_args=["-O2"]),
                   # Patchify through the normalisation table (plain C, no library).
                   Extension("datapipe.image._patches", sources=["datapipe/image/patches.c"],
                             optional=True, extra_compile_args=["-O2"]),
                   # ColorJitter's adjustments per image (plain C, no library); -O3
                   # vectorizes the blends (brightness, contrast, saturation: ~2x).
                   Extension("datapipe.image._colour", sources=["datapipe/image/colour.c"],
                             optional=True, extra_compile_args=["-O3"])])
