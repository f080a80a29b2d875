"""NVIDIA kernel layer for KERNELS=triton: Triton kernels compiled ahead for the GPU and entered into the tinygrad graph
(program.py), one module per kernel family (matmul.py). Imported only where a config sets KERNELS=triton."""
