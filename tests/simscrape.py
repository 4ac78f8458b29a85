"""Scrapes of kvplan's own simulator in tests/metricsserver.py's format (review 23d's
scrapesim.py): the engine's running, waiting, KV usage and counters after every step,
sampled at `scrapes` times over the middle 80 % of the run, with the length histograms of
the requests finished by then and the pool in cache_config_info."""

from __future__ import annotations

import bisect

from metricsserver import LEN_BUCKETS, State, vllm_scrape

from kvplan.core import perf
from kvplan.core.workload import preset
from kvplan.sim import engine as E
from kvplan.sim import run as R
from kvplan.sim import setup as S
from kvplan.sources.resolve import resolve_gpu, resolve_model


def _bucket(x: float) -> float:
    return next((b for b in LEN_BUCKETS if x <= b), float("inf"))


def simulated_scrapes(monkeypatch, model: str, gpu: str, mml: str, seqs: int | None,
                      rate: float, requests: int, workload: str = "chat", seed: int = 1,
                      scrapes: int = 10) -> tuple[str, R.Stats]:
    """(the scrapes' text, the run's stats) of one open-loop run at `rate`."""
    samples: list[tuple] = []

    class Recorded(E.Engine):
        def _sample(self) -> None:
            samples.append((self.now, len(self.running), len(self.waiting),
                            1 - self.free / self.cfg.num_blocks, self.stats.preemptions,
                            self.stats.output_tokens))

        def step(self):
            out = super().step()
            self._sample()
            return out

        def jump(self, until):
            out = super().jump(until)
            self._sample()
            return out

    monkeypatch.setattr(R, "Engine", Recorded)
    m, g = resolve_model(model, None), resolve_gpu(gpu, None, None)
    r, _, _ = S.sized(m, g, 1, mml, "auto", None, None, seqs, None)
    cfg = S.engine_config(r, seqs, None, None, g.vendor)
    st = R.simulate(cfg, perf.build(r, g), preset(workload),
                    R.Load(rate=rate, requests=requests), seed)
    end = max(c.finish for c in st.completed)
    times = [end * (0.1 + 0.8 * i / (scrapes - 1)) for i in range(scrapes)]
    at = [s[0] for s in samples]
    done = sorted(st.completed, key=lambda c: c.finish)
    out = []
    for t in times:
        _, run, wait, kv, pre, gen = samples[max(0, bisect.bisect_right(at, t) - 1)]
        fin = done[:bisect.bisect_right([c.finish for c in done], t)]
        pl: dict[float, float] = {}
        gl: dict[float, float] = {}
        for c in fin:
            pl[_bucket(c.prompt)] = pl.get(_bucket(c.prompt), 0) + 1
            gl[_bucket(c.output)] = gl.get(_bucket(c.output), 0) + 1
        s = State(running=run, waiting=wait, kv=round(min(max(kv, 0), 1), 4), preemptions=pre,
                  prompt_tokens=sum(c.prompt for c in fin), generation_tokens=gen,
                  finished={"stop": len(fin), "length": 0}, prompt_lens=pl,
                  prompt_sum=sum(c.prompt for c in fin), gen_lens=gl,
                  gen_sum=sum(c.output for c in fin), blocks=r.num_gpu_blocks,
                  block_size=r.block_size, gpu_memory_utilization=r.budget.utilization)
        out.append(vllm_scrape({None: s}, model=r.model, timestamp=1.7e9 + t))
    return "".join(out), st
