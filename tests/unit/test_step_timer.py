"""StepTimer: what a BENCHMARK run reports. The JIT's compiling step must not decide the median."""
from tinyperf.benchmarks.common.runtime import JIT_WARMUP_STEPS, StepTimer, epoch_summary


def timer_with(steps):
  t = StepTimer()
  for s in steps: t.add(s, 0.0)
  return t


def test_median_is_over_the_replayed_steps_only():
  # the 2-GPU BERT-large steps of 2026-11-30 (s): the compiling step (the capture), then four replays, one of them slow
  t = timer_with([158.9126, 2.3616, 2.3557, 3.1831, 2.3529])
  assert t.timed() == [2.3616, 2.3557, 3.1831, 2.3529]
  assert t.median() == 2.3616          # sorted(replays)[4 // 2]; over all five steps it would be 3.1831
  assert "median of 4 steps 2361.6 ms" in t.summary(64, 100, "seq")
  assert "27.1 seq/s" in t.summary(64, 100, "seq")


def test_benchmark_n_means_n_steps_after_the_warmup():
  t = timer_with([9.0])
  assert not t.done(1)
  t.add(1.0, 0.0)
  assert t.done(1) and not t.done(2)
  assert JIT_WARMUP_STEPS == 1   # the steps capture their first call (runtime.captured_jit)


def test_a_run_stopped_within_the_warmup_still_reports_what_it_has():
  t = timer_with([5.0])
  assert t.timed() == [5.0] and t.median() == 5.0


def test_epoch_summary_sets_a_runs_first_steps_apart():
  # RUN's first epoch on the H200 (2026-12-01): two steps rebuild the JIT, the rest replay; the wall time counts all
  t = timer_with([7.0, 9.0])  # an earlier epoch's steps are not this epoch's
  for s, w in ((74.3, 0.5), (22.1, 0.0), (1.08, 0.0), (1.07, 0.8), (1.09, 0.0)): t.add(s, w)
  line = epoch_summary(2, t, 2, 256, 100.0, "img")
  assert line.startswith("epoch 2: 5 steps in 100.0 s (12.8 img/s with the loader)")
  assert "first steps 74300.0, 22100.0, 1080.0 ms" in line
  assert "median of steps 1.. 1090.0 ms" in line and "max 800.0 ms" in line


def test_a_toy_or_cpu_config_projects_no_time_to_train():
  """cpu_smoke's toy ResNet timed on ImageNet's step count projected '7h1m' to train: a figure of no model anyone trains."""
  from tinyperf.benchmarks.registry import load_config
  from tinyperf.benchmarks.common.runtime import no_projection
  toy = load_config("resnet", "cpu_smoke", environ={})
  why = no_projection(toy)
  assert "cpu_smoke" in why and "toy" in why
  line = timer_with([9.0, 0.5]).summary(64, 40_000, "img", why)
  assert "no projected time to train: cpu_smoke times a toy model" in line and "5h33m" not in line
  assert no_projection(load_config("resnet", "1xH200", environ={})) == ""
  assert "BERT_LAYERS=2" in no_projection(load_config("bert", "1xH200", environ={"BERT_LAYERS": "2", "DIVISION": "open"}))
  assert "projected time to train 5h33m" in timer_with([9.0, 0.5]).summary(64, 40_000, "img")


def test_provenance_names_a_dirty_checkout(tmp_path, monkeypatch):
  # a host run from a checkout with uncommitted changes recorded the clean commit, which `tinyperf package` then shipped
  from tinyperf.benchmarks.common import runtime
  import subprocess
  def git(*a): return subprocess.run(["git", "-C", str(tmp_path), *a], capture_output=True, text=True, check=True).stdout.strip()
  git("init", "-q"); (tmp_path / "f.py").write_text("a = 1\n"); git("add", "f.py")
  git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "one")
  monkeypatch.setattr(runtime, "ROOT", tmp_path)
  monkeypatch.delenv("TINYPERF_GIT_SHA", raising=False)
  head = git("rev-parse", "HEAD")
  (tmp_path / "untracked.txt").write_text("not code of the commit, not a change to it\n")
  assert runtime.provenance()["git_sha"] == head
  (tmp_path / "f.py").write_text("a = 2\n")
  assert runtime.provenance()["git_sha"] == head + "-dirty"
