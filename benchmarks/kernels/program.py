"""Triton kernels as tinygrad programs: compiled ahead of time for the GPU's architecture and entered into the graph as a
PROGRAM that carries its cubin, through Tensor.custom_kernel. A captured TinyJit step launches them like its own kernels
(in its CUDA graph), with no Python per step.

What tinygrad 0.14 does not do for a foreign cubin, and how it is done here (docs/decisions.md):
  - dynamic shared memory: Triton's tiles live in dynamic shared memory (up to 227 KB on Hopper). CUDAProgram takes an
    `smem` size, but Device.runtime(elf) never passes one, so the CUDA device's program factory is replaced by one that
    passes each registered kernel's size, looked up by its cubin (the symbol is the Triton function's name, shared by
    every shape and tile of one kernel);
  - Triton appends two hidden pointer parameters (global and profile scratch) after the kernel's own. Both sizes are 0
    for these kernels (checked at compile time), so one 16-byte buffer is passed for each.
The compile runs once per (kernel, shape, tile, arch) and Triton caches it on disk (TRITON_CACHE_DIR), so a second
INIT loads it in milliseconds.
"""
from __future__ import annotations
import functools
import re
from dataclasses import dataclass

from tinygrad import Device, Tensor, dtypes
from tinygrad.renderer import Estimates
from tinygrad.uop.ops import KernelInfo, Ops, ProgramInfo, UOp

HIDDEN_PARAMS = 2          # Triton 3.x: global scratch, profile scratch
SMEM: dict[bytes, int] = {}  # cubin -> dynamic shared memory bytes, read by the program factory below


@dataclass(frozen=True)
class Compiled:
  name: str      # the kernel's symbol in the cubin
  cubin: bytes
  ptx: str
  smem: int      # dynamic shared memory bytes per block
  threads: int   # 32 * num_warps


def cuda_arch(device: str) -> int:
  """90 for an H200's "sm_90": the target Triton compiles for."""
  arch = getattr(Device[device], "arch", "")
  if not (m := re.fullmatch(r"sm_(\d+)a?", arch)):
    raise RuntimeError(f"KERNELS=triton needs a CUDA device (DEV=CUDA); {device} reports arch {arch!r}")
  return int(m.group(1))


@functools.cache
def compile_kernel(fn, signature: tuple, constexprs: tuple, num_warps: int, num_stages: int, arch: int) -> Compiled:
  """Triton-compile fn for sm_<arch>: signature ((arg, "*fp16"), ...) of its pointer arguments (each 16-byte aligned),
  constexprs ((arg, value), ...) of the rest. Triton's own disk cache makes a repeat compile a file read."""
  import triton
  from triton.backends.compiler import GPUTarget
  sig = dict(signature) | {k: "constexpr" for k, _ in constexprs}
  aligned = {(i,): [["tt.divisibility", 16]] for i, (k, t) in enumerate(signature) if t.startswith("*")}
  src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=dict(constexprs), attrs=aligned)
  ck = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, "num_stages": num_stages})
  md = ck.metadata
  if md.global_scratch_size or md.profile_scratch_size:
    raise RuntimeError(f"{md.name}: Triton asks for scratch memory ({md.global_scratch_size} + {md.profile_scratch_size} "
                       "bytes per program), which this layer does not allocate")
  return Compiled(md.name, ck.asm["cubin"], ck.asm["ptx"], md.shared, 32 * md.num_warps)


def _install_smem_factory(device: str):
  """Make Device[device] build CUDAPrograms with the dynamic shared memory their kernel registered in SMEM."""
  dev = Device[device]
  from tinygrad.runtime.ops_cuda import CUDAProgram
  if getattr(dev.runtime_t, "passes_smem", False): return
  if dev.runtime_t is not CUDAProgram:
    raise RuntimeError(f"KERNELS=triton runs on tinygrad's CUDA backend (DEV=CUDA); {device} uses {dev.runtime_t.__name__}")
  class SmemCUDAProgram(CUDAProgram):
    passes_smem = True
    def __init__(self, dev, obj, smem: int = 0): super().__init__(dev, obj, smem=SMEM.get(obj.lib, smem))
  dev.runtime_t = SmemCUDAProgram


def program(k: Compiled, params: list[UOp], grid: int, outs: tuple[int, ...], ins: tuple[int, ...], device: str,
            flops: int, nbytes: int) -> UOp:
  """The PROGRAM for custom_kernel's fxn: params are its placeholders, which must be in the kernel's argument order
  (slot i = argument i: tinygrad's CUDA graph passes a call's buffers by slot), the hidden scratch buffers last; grid
  the number of blocks; outs/ins the slots written and read (the CUDA graph orders kernels by them)."""
  _install_smem_factory(device)
  SMEM[k.cubin] = k.smem
  bufs = [p.base for p in params]
  assert [b.arg.slot for b in bufs] == list(range(len(bufs))), "params must be in slot order"
  sink = UOp.sink(*bufs, arg=KernelInfo(name=k.name, estimates=Estimates(ops=flops, mem=nbytes)))
  info = ProgramInfo(name=k.name, global_size=(grid, 1, 1), local_size=(k.threads, 1, 1),
                     globals=tuple(b.arg.slot for b in bufs), outs=outs, ins=ins, target=Device[device].renderer.target)
  return UOp(Ops.PROGRAM, src=(sink, UOp(Ops.LINEAR, src=tuple(bufs)), UOp(Ops.SOURCE, arg=k.ptx), UOp(Ops.BINARY, arg=k.cubin)),
             arg=info)


def scratch(device) -> tuple[Tensor, Tensor]:
  """The two unused buffers for Triton's hidden scratch parameters."""
  return tuple(Tensor.empty(16, dtype=dtypes.uint8, device=device) for _ in range(HIDDEN_PARAMS))
