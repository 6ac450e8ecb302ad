# Float conversion kernels (ToTensor + Normalize in one pass); included by _native.pyx.
