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
INIT loads it in milliseconds. COMPILED records each compile of this process (tile, seconds, cache hit), which the
trainers write into the run's folder after INIT (write_record).
"""
from __future__ import annotations
import functools
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tinygrad import Device, Tensor, dtypes
from tinygrad.renderer import Estimates
from tinygrad.uop.ops import KernelInfo, Ops, ProgramInfo, UOp

try:
  import triton
  import triton.language as tl
except ImportError:   # CPU-only installs: no Triton kernel is built there
  triton = None

HIDDEN_PARAMS = 2          # Triton 3.x: global scratch, profile scratch
POINTER = {dtypes.half: "*fp16", dtypes.bfloat16: "*bf16", dtypes.float32: "*fp32"}   # a buffer's Triton argument type
SMEM: dict[bytes, int] = {}  # cubin -> dynamic shared memory bytes, read by the program factory below


def pick(ptrs, which, COUNT: tl.constexpr):
  """ptrs[which] of a tuple of COUNT pointers (a kernel's tensors of one launch): a select per tensor, so that the body
  is compiled once, not COUNT times (unrolled, 32 LAMB tensors took 18 s to compile)."""
  x = ptrs[0]
  for i in tl.static_range(1, COUNT): x = tl.where(which == i, ptrs[i], x)
  return x

if triton is not None: pick = triton.jit(pick)


@dataclass(frozen=True)
class Compiled:
  name: str      # the kernel's symbol in the cubin
  cubin: bytes
  ptx: str
  smem: int      # dynamic shared memory bytes per block
  threads: int   # 32 * num_warps


def pow2(n: int) -> int:
  """n rounded up to a power of two (a Triton block: tl.arange takes powers of two)."""
  return 1 << (n - 1).bit_length()


def devices(device: str | tuple[str, ...]) -> tuple[str, ...]:
  return device if isinstance(device, tuple) else (device,)


@functools.cache
def _triton_imports() -> bool:
  try: import triton   # noqa: F401
  except ImportError: return False   # CPU-only installs
  return True


# tinygrad's NULL device compiles every kernel and runs none: there the Triton kernels are built for NULL_ARCH and
# entered into the graph as on CUDA, so that a GPU config's step is counted (kernels, memory) on a machine without one
NULL_ARCH = 90   # the H200's sm_90, which the CUDA configs target


def on_triton(t: Tensor) -> bool:
  """t lives on CUDA (or NULL) and Triton imports: a kernel family's Triton path, else its tinygrad fallback (CPU, in
  tests)."""
  return devices(t.device)[0].split(":")[0] in ("CUDA", "NULL") and _triton_imports()


def batch_axis(t: Tensor) -> int | None:
  """0 where t is sharded over devices along the batch (each device computes on its own rows), else None."""
  return 0 if isinstance(t.device, tuple) and t.uop.axis == 0 else None


def cuda_arch(device: str | tuple[str, ...]) -> int:
  """90 for an H200's "sm_90": the target Triton compiles for, the same on every device of a multi-device tensor."""
  if all(d.split(":")[0] == "NULL" for d in devices(device)): return NULL_ARCH
  archs = sorted({getattr(Device[d], "arch", "") for d in devices(device)})
  if len(archs) != 1 or not (m := re.fullmatch(r"sm_(\d+)a?", archs[0])):
    raise RuntimeError(f"KERNELS=triton needs CUDA devices of one architecture (DEV=CUDA); {device} report {archs}")
  return int(m.group(1))


# ---- several devices: a sharded tensor's call runs once per device ----
# tinygrad 0.14 launches a custom_kernel call once per device when its sources are multi-device tensors (the CALL keeps
# its multi sources, each device's launch gets that device's buffers), but the kernel sees the full shapes: it must be
# built for one device's piece (local_shape), and its outputs allocated so that each device's piece has that shape.

def local_shape(t: Tensor) -> tuple[int, ...]:
  """The shape of one device's piece of t: the shard of a tensor sharded over devices, else t's shape."""
  return tuple(t.uop.shard_shape) if isinstance(t.device, tuple) else t.shape


def contiguous(t: Tensor) -> Tensor:
  """t as a kernel's source, laid out in row-major order: t itself where it is a buffer or another kernel's output seen
  through reshapes (tinygrad's contiguous() would copy a reshaped kernel output), else t.contiguous()."""
  return t if t.uop.has_buffer_identity(after_ok=True) else t.contiguous()


def empty_shards(shape: tuple[int, ...], dtype, device, axis: int | None) -> Tensor:
  """An output whose piece on each device is `shape`: sharded along axis (the full tensor is ndev times as long there),
  or replicated with axis None."""
  t = Tensor.empty(*shape, dtype=dtype, device=device)
  return Tensor(t.uop.unshard(axis=axis)) if isinstance(device, tuple) and axis is not None else t


def empty_partials(shape: tuple[int, ...], dtype, device) -> Tensor:
  """An output for per-device partial results: on several devices one private `shape` per device, stacked on a new
  leading axis (ndev, *shape) sharded over the devices, summed by partial_sum; on one device `shape` itself."""
  if not isinstance(device, tuple): return Tensor.empty(*shape, dtype=dtype, device=device)
  return empty_shards((1, *shape), dtype, device, 0)


def partial_sum(t: Tensor) -> Tensor:
  """The sum over devices of the per-device partials of empty_partials: tinygrad's all-reduce, which
  leaves the result replicated, as the gradient of a replicated weight must be. One device: t itself."""
  return t.sum(0) if isinstance(t.device, tuple) else t


SEED_STRIDE = 0x9E3779B9   # between the dropout seeds of consecutive devices


def device_seeds(seed: Tensor, device) -> Tensor:
  """A dropout seed (1,) as the kernels take it, uint32: on several devices one per device, a (ndev,) sharded, device
  d's seed + d * SEED_STRIDE (each device numbers its piece's elements from 0, so a shared seed would repeat the mask);
  on one device seed itself."""
  devs = devices(device)
  seed = seed.cast(dtypes.uint32).reshape(1)
  if len(devs) > 1:
    seed = seed.to(devs[0]) + Tensor.arange(len(devs)).to(devs[0]).cast(dtypes.uint32) * SEED_STRIDE
    seed = seed.shard(devs, axis=0)
  return seed.contiguous()


# ---- what this process compiled: every family's kernels register here through compile_kernel ----
# the constexprs a tile chooses; the others are the problem's
TILE_PARAMS = ("BM", "BN", "BK", "RB", "IB", "BHW", "BLOCK", "ROWS", "SPLIT", "GROUP")


@dataclass(frozen=True)
class KernelRecord:
  family: str        # the tinyperf.benchmarks.kernels module of the kernel: matmul, attention, conv, layernorm
  symbol: str        # the kernel's symbol in the cubin
  shape: dict        # the problem the tile was chosen for: the constexprs not in TILE_PARAMS and the pointer types
  tile: dict         # the TILE_PARAMS it sets, num_warps, num_stages
  arch: int
  compile_s: float
  from_cache: bool   # Triton read it from its disk cache (TRITON_CACHE_DIR) instead of compiling it
  smem: int          # dynamic shared memory bytes per block


COMPILED: list[KernelRecord] = []   # in compile order; compile_kernel's own cache makes each key one entry per process


def _triton_compile(src, arch: int, options: dict):
  """triton.compile and (seconds, whether Triton's disk cache answered), as Triton's compilation listener reports it."""
  import triton
  from triton.backends.compiler import GPUTarget
  hits, before = [], triton.knobs.compilation.listener
  def listen(**kw):
    hits.append(kw["cache_hit"])
    if before: before(**kw)
  triton.knobs.compilation.listener = listen
  t0 = time.perf_counter()
  try: ck = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
  finally: triton.knobs.compilation.listener = before
  return ck, time.perf_counter() - t0, bool(hits and hits[0])


@functools.cache
def compile_kernel(fn, signature: tuple, constexprs: tuple, num_warps: int, num_stages: int, arch: int) -> Compiled:
  """Triton-compile fn for sm_<arch>: signature ((arg, "*fp16"), ...) of its pointer arguments (each 16-byte aligned;
  a tuple of types for a tuple of pointers), constexprs ((arg, value), ...) of the rest. Triton's own disk cache makes a
  repeat compile a file read. Recorded in COMPILED."""
  import triton
  sig = dict(signature) | {k: "constexpr" for k, _ in constexprs}
  # each pointer's path: (argument,), or (argument, element) in a tuple
  paths = [((i,), t) for i, (_, t) in enumerate(signature) if isinstance(t, str)]
  paths += [((i, j), tj) for i, (_, t) in enumerate(signature) if not isinstance(t, str) for j, tj in enumerate(t)]
  aligned = {path: [["tt.divisibility", 16]] for path, t in paths if t.startswith("*")}
  src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=dict(constexprs), attrs=aligned)
  ck, seconds, hit = _triton_compile(src, arch, {"num_warps": num_warps, "num_stages": num_stages})
  md = ck.metadata
  if md.global_scratch_size or md.profile_scratch_size:
    raise RuntimeError(f"{md.name}: Triton asks for scratch memory ({md.global_scratch_size} + {md.profile_scratch_size} "
                       "bytes per program), which this layer does not allocate")
  consts = dict(constexprs)
  COMPILED.append(KernelRecord(
    family=getattr(fn, "fn", fn).__module__.rpartition(".")[2], symbol=md.name,
    shape={k: v for k, v in consts.items() if k not in TILE_PARAMS} | {"pointers": dict(signature)},
    tile={k: consts[k] for k in TILE_PARAMS if k in consts} | {"num_warps": num_warps, "num_stages": num_stages},
    arch=arch, compile_s=round(seconds, 4), from_cache=hit, smem=md.shared))
  return Compiled(md.name, ck.asm["cubin"], ck.asm["ptx"], md.shared, 32 * md.num_warps)


def _tile_name(tile: dict) -> str:
  """128x256x64 w8 s3: the block sizes (GEMM's, rows or images by pixels, elements), warps and stages of a tile."""
  blocks = "x".join(str(tile[k]) for k in ("BM", "BN", "BK", "RB", "IB", "BHW", "BLOCK") if k in tile)
  return f"{blocks} w{tile['num_warps']} s{tile['num_stages']}"


def record_line(records: list[KernelRecord]) -> str:
  """The console line of a run's kernels: how many, the seconds spent compiling, Triton's cache hits, and per family
  its kernels and their tile (or the number of distinct tiles)."""
  families: dict[str, list[KernelRecord]] = {}
  for r in records: families.setdefault(r.family, []).append(r)
  def tiles(rs):
    names = sorted({_tile_name(r.tile) for r in rs})
    return f"at {names[0]}" if len(names) == 1 else f"in {len(names)} tiles"
  per_family = ", ".join(f"{f} {len(rs)} kernel{'s' * (len(rs) > 1)} {tiles(rs)}" for f, rs in families.items())
  return (f"kernels: {len(records)} compiled in {sum(r.compile_s for r in records):.1f} s "
          f"({sum(r.from_cache for r in records)} from Triton's cache); tiles: {per_family or 'none'}")


def _triton_cache_dir() -> str | None:
  """Where Triton keeps compiled kernels: its own answer once imported (TRITON_CACHE_DIR, else under TRITON_HOME or ~)."""
  return sys.modules["triton"].knobs.cache.dir if "triton" in sys.modules else os.environ.get("TRITON_CACHE_DIR")


def write_record(path: Path, records: list[KernelRecord] | None = None) -> str:
  """Write the record of the kernels compiled (default: this process's COMPILED) to path as JSON, with the line that
  summarises it and where Triton's cache is; returns that line."""
  records = COMPILED if records is None else records
  line = record_line(records)
  doc = {"summary": line, "kernels": len(records), "compile_s": round(sum(r.compile_s for r in records), 3),
         "from_cache": sum(r.from_cache for r in records), "triton_cache_dir": _triton_cache_dir(),
         "compiled": [asdict(r) for r in records]}
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(doc, indent=1) + "\n")
  return line


def _install_smem_factory(device: str):
  """Make Device[device] build CUDAPrograms with the dynamic shared memory their kernel registered in SMEM."""
  if device.split(":")[0] == "NULL": return   # runs nothing: no shared memory to size
  dev = Device[device]
  from tinygrad.runtime.ops_cuda import CUDAProgram
  if getattr(dev.runtime_t, "passes_smem", False): return
  if dev.runtime_t is not CUDAProgram:
    raise RuntimeError(f"KERNELS=triton runs on tinygrad's CUDA backend (DEV=CUDA); {device} uses {dev.runtime_t.__name__}")
  class SmemCUDAProgram(CUDAProgram):
    passes_smem = True
    def __init__(self, dev, obj, smem: int = 0): super().__init__(dev, obj, smem=SMEM.get(obj.lib, smem))
  dev.runtime_t = SmemCUDAProgram


def program(k: Compiled, params: list[UOp], grid: int, outs: tuple[int, ...], ins: tuple[int, ...],
            device: str | tuple[str, ...], flops: int, nbytes: int) -> UOp:
  """The PROGRAM for custom_kernel's fxn: params are its placeholders, which must be in the kernel's argument order
  (slot i = argument i: tinygrad's CUDA graph passes a call's buffers by slot), the hidden scratch buffers last; grid
  the number of blocks; outs/ins the slots written and read (the CUDA graph orders kernels by them)."""
  for d in devices(device): _install_smem_factory(d)   # each device builds its own CUDAProgram
  SMEM[k.cubin] = k.smem
  bufs = [p.base for p in params]
  assert [b.arg.slot for b in bufs] == list(range(len(bufs))), "params must be in slot order"
  sink = UOp.sink(*bufs, arg=KernelInfo(name=k.name, estimates=Estimates(ops=flops, mem=nbytes)))
  info = ProgramInfo(name=k.name, global_size=(grid, 1, 1), local_size=(k.threads, 1, 1),
                     globals=tuple(b.arg.slot for b in bufs), outs=outs, ins=ins,
                     target=Device[devices(device)[0]].renderer.target)
  return UOp(Ops.PROGRAM, src=(sink, UOp(Ops.LINEAR, src=tuple(bufs)), UOp(Ops.SOURCE, arg=k.ptx), UOp(Ops.BINARY, arg=k.cubin)),
             arg=info)


def scratch(device) -> tuple[Tensor, Tensor]:
  """The two unused buffers for Triton's hidden scratch parameters."""
  return tuple(Tensor.empty(16, dtype=dtypes.uint8, device=device) for _ in range(HIDDEN_PARAMS))
