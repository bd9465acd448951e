"""Build the optional region-JPEG-decode extension; everything else is in pyproject.toml.

`optional=True`: without libjpeg headers the build is skipped and datapipe decodes with PIL
alone (slower for random crops, same results within rounding).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("datapipe.image._jpeg", sources=["datapipe/image/_jpeg.c"],
                             libraries=["jpeg"], optional=True,
                             extra_compile_args=["-O2"])])
