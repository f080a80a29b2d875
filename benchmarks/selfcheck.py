"""`python -m tinyperf.benchmarks.selfcheck --vendor nv|amd|cpu [--gpu-libs require|skip]`: prove an image can do its job.

Run as the last step of every image build (a failure fails the build) and usable in a running container. Checks:
  - Python >= 3.11, the locked packages import, tinyperf and tinygrad are the versions the image's labels claim;
  - clang is on PATH and tinygrad's CPU backend compiles and runs a kernel with it (in a child process, DEV=CPU);
  - nv: NVRTC and nvJitLink load through tinygrad's own loaders and answer their version calls, and NVRTC compiles a
    probe kernel and BERT's atomic embedding-gradient kernel to cubins for sm_89 (RTX 4090) and sm_90 (H100/H200);
    amd: libamd_comgr loads through tinygrad's loader and answers its version call.
    No GPU is needed for these calls. With --gpu-libs skip (a build on a base that is not the vendor image, as in CI),
    the GPU-library part is skipped and says so loudly.
Exit 0 when everything required passed, 1 otherwise; one line per check."""
from __future__ import annotations
import argparse
import ctypes
import os
import shutil
import subprocess
import sys
from importlib import metadata

RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, fn):
  try:
    detail = fn() or ""
    RESULTS.append((name, True, detail)); print(f"selfcheck ok    {name}: {detail}", flush=True)
  except Exception as e:  # every failure is reported, none stops the others
    RESULTS.append((name, False, f"{type(e).__name__}: {e}")); print(f"selfcheck FAILED {name}: {type(e).__name__}: {e}", flush=True)


def python_version():
  assert sys.version_info >= (3, 11), f"Python {sys.version.split()[0]} < 3.11 (tinygrad 0.14 needs 3.11)"
  return sys.version.split()[0]


def packages():
  import numpy, PIL, yaml, mlperf_logging, tqdm, docker  # noqa: F401,E401  (the runtime deps of requirements.lock)
  tp, tg = metadata.version("tinyperf"), metadata.version("tinygrad")
  want = os.environ.get("TINYGRAD_VERSION")
  if want and want != "unknown": assert tg == want, f"tinygrad {tg} installed, image label says {want}"
  want = os.environ.get("TINYPERF_VERSION")
  if want and want != "unknown": assert tp == want, f"tinyperf {tp} installed, image label says {want}"
  return f"tinyperf {tp}, tinygrad {tg}, numpy {numpy.__version__}, mlperf-logging {metadata.version('mlperf-logging')}"


CPU_PROBE = "from tinygrad import Tensor; v = (Tensor([1.0, 2.0, 3.0]) * 2 + 1).sum().item(); assert v == 15.0, v; print(v)"


def cpu_backend():
  clang = shutil.which("clang")
  assert clang, "clang is not on PATH (tinygrad's CPU backend compiles kernels with it)"
  env = {**os.environ, "DEV": "CPU"}
  r = subprocess.run([sys.executable, "-c", CPU_PROBE], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, f"tinygrad CPU kernel failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
  return f"{clang}; (Tensor([1,2,3])*2+1).sum() = {r.stdout.strip()} on DEV=CPU"


def nv_libs():
  from tinygrad.runtime.autogen import nvrtc, nvjitlink
  major, minor = ctypes.c_int32(), ctypes.c_int32()
  assert nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) == 0, "nvrtcVersion failed"
  jmaj, jmin = ctypes.c_uint32(), ctypes.c_uint32()
  assert nvjitlink.nvJitLinkVersion(ctypes.byref(jmaj), ctypes.byref(jmin)) == 0, "nvJitLinkVersion failed"
  # loading is not compiling: have NVRTC build a kernel for each GPU generation our NV platforms use, as tinygrad's
  # CUDA backend does at run time (no GPU is needed to compile)
  from tinygrad.runtime.support.compiler_cuda import NVRTCCompiler
  for arch in NV_ARCHS:
    for name, src in (("probe", NV_PROBE_KERNEL), ("embedding_scatter_add", render_embedding_scatter("CUDA", arch))):
      cubin = NVRTCCompiler(arch, ptx=False).compile(src)
      assert cubin[:4] == b"\x7fELF", f"NVRTC returned no ELF cubin of {name} for {arch}"
  return f"NVRTC {major.value}.{minor.value}, nvJitLink {jmaj.value}.{jmin.value}; compiled a probe and BERT's atomic " \
    "embedding-gradient kernel for " + ", ".join(f"{a} ({what})" for a, what in NV_ARCHS.items())


def render_embedding_scatter(backend: str, arch: str) -> str:
  """Source of BERT's atomic embedding-gradient kernel (benchmarks/bert/model.py scatter_add_rows, BERT-large's table
  and 8 x 512 half gradient rows) as tinygrad renders it for backend ("CUDA", "NV", "AMD") and arch; no GPU needed."""
  from tinygrad import Tensor, dtypes
  from tinygrad.codegen import full_rewrite_to_sink
  from tinygrad.codegen.late.linearizer import linearize
  from tinygrad.helpers import Target
  from tinygrad.renderer.cstyle import CUDARenderer, HIPRenderer
  from tinygrad.uop.ops import UOp
  from tinyperf.benchmarks.bert.model import scatter_add_rows
  renderer = (HIPRenderer if backend == "AMD" else CUDARenderer)(Target(backend, arch=arch))
  args = (Tensor.empty(30522, 1024, dtype=dtypes.float32), Tensor.empty(8, 512, 1024, dtype=dtypes.half),
          Tensor.empty(8, 512, dtype=dtypes.int32))
  sink = scatter_add_rows(backend)(*[UOp.placeholder_like(t.uop, slot=i) for i, t in enumerate(args)])
  return renderer.render(list(linearize(full_rewrite_to_sink(sink, renderer))))


NV_ARCHS = {"sm_89": "RTX 4090, tinybox green", "sm_90": "H100/H200"}
NV_PROBE_KERNEL = 'extern "C" __global__ void probe(float *x) { x[threadIdx.x] = 2.0f * x[threadIdx.x] + 1.0f; }'


def amd_libs():
  from tinygrad.runtime.autogen import comgr
  major, minor = ctypes.c_uint64(), ctypes.c_uint64()
  comgr.amd_comgr_get_version(ctypes.byref(major), ctypes.byref(minor))
  return f"amd_comgr {major.value}.{minor.value} (ROCM_PATH={os.environ.get('ROCM_PATH', '/opt/rocm')})"


GPU_LIBS = {"nv": ("NVRTC + nvJitLink", nv_libs), "amd": ("libamd_comgr", amd_libs)}


def build_parser() -> argparse.ArgumentParser:
  """The parser of `python -m tinyperf.benchmarks.selfcheck` (test_doc_commands checks the docs' commands with it)."""
  p = argparse.ArgumentParser(prog="python -m tinyperf.benchmarks.selfcheck", description=__doc__.splitlines()[0])
  p.add_argument("--vendor", required=True, choices=("nv", "amd", "cpu"))
  p.add_argument("--gpu-libs", default="require", choices=("require", "skip"),
                 help="skip only when the base image is not the vendor's (CI builds on a local Debian base)")
  return p


def main(argv=None) -> int:
  args = build_parser().parse_args(argv)
  print(f"selfcheck: {args.vendor} image, base {os.environ.get('TINYPERF_BASE_IMAGE', '?')} "
        f"({os.environ.get('TINYPERF_BASE_DIGEST', '?')})", flush=True)
  check("python", python_version)
  check("packages", packages)
  check("clang + tinygrad CPU", cpu_backend)
  if args.vendor in GPU_LIBS:
    what, fn = GPU_LIBS[args.vendor]
    if args.gpu_libs == "skip":
      bar = "!" * 100
      print(f"{bar}\nselfcheck SKIPPED {what}: --gpu-libs skip (this base, {os.environ.get('TINYPERF_BASE_IMAGE', '?')}, "
            f"is not the vendor image). This image CANNOT run the {args.vendor.upper()} backend; it only proves the "
            f"layers above the base.\n{bar}", flush=True)
    else:
      check(what, fn)
  bad = [n for n, ok, _ in RESULTS if not ok]
  print(f"selfcheck: {len(RESULTS) - len(bad)} passed, {len(bad)} failed" + (f" ({', '.join(bad)})" if bad else ""), flush=True)
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
