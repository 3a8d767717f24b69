"""`convert --jobs N`: the parts of a conversion (text encoder, transformer, VAE) built in N processes at once.

Each part writes its own folder of the staging repo and returns what it saved; the parent assembles the
manifest from the parts in their fixed order, so the repository is byte for byte the one `--jobs 1` writes.
Processes are started with `spawn` (a fresh interpreter: nothing of the parent's memory is shared or copied);
their log lines reach the parent through a queue, prefixed with the part. Without --jobs, the count is the
largest whose estimated peaks fit the memory the machine has free (default_jobs); the estimate and the measured
peaks per job count are in docs/converting.md.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from builder.memory import available_memory_bytes, rss_bytes
from builder.repo.sizes import gigabytes

# A part's peak resident memory, estimated from the parameters in its checkpoint folder: the process before
# any work, plus bytes per parameter by precision (the measured peaks in docs/converting.md, rounded up).
PROCESS_BYTES = 600_000_000
PEAK_BYTES_PER_PARAMETER = {"q4": 1.4, "q4f16": 1.4, "fp32": 4.5}
# Of the memory the machine has free, the share the estimated peaks may take together.
MEMORY_SHARE = 0.8

# One part's work: (part, log) -> its result. Must be picklable for the processes: a top-level function,
# or a functools.partial of one.
Work = Callable[..., Any]


def estimated_peak(folder: Path, precision: str) -> int:
    """The estimated peak resident memory of converting the component in `folder` (its safetensors headers)."""
    from builder.convert.checkpoint import Checkpoint

    parameters = 0
    for tensor in Checkpoint(folder).tensors.values():
        count = 1
        for dim in tensor.shape:
            count *= dim
        parameters += count
    return PROCESS_BYTES + int(parameters * PEAK_BYTES_PER_PARAMETER[precision])


def default_jobs(peaks: Sequence[int], *, available: int | None, cpus: int) -> int:
    """The most parts that may run at once: the largest estimated peaks together within MEMORY_SHARE of the
    `available` memory, and no more than the CPUs; 1 when the available memory is unknown."""
    if available is None:
        return 1
    largest = sorted(peaks, reverse=True)
    jobs = 1
    while jobs < min(len(largest), cpus) and sum(largest[: jobs + 1]) <= MEMORY_SHARE * available:
        jobs += 1
    return jobs


def run_parts(parts: Sequence[str], work: Work, *, jobs: int, log: Callable[[str], None]) -> Mapping[str, Any]:
    """work(part, log=...) for every part, `jobs` at a time in their own processes (in this one for 1 job).
    Returns {part: result}. The first failure stops the others and is raised."""
    if jobs <= 1:
        return {part: work(part, log=log) for part in parts}
    context = multiprocessing.get_context("spawn")
    lines: Any = context.Queue()
    results: dict[str, Any] = {}
    peak = 0
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_keep_queue, initargs=(lines,)) as pool:
        pending: dict[Future[Any], str] = {pool.submit(_run_part, work, part): part for part in parts}
        try:
            while pending:
                done, _ = wait(pending, timeout=0.5, return_when=FIRST_EXCEPTION)
                _forward(lines, log)
                peak = max(
                    peak,
                    sum(
                        rss_bytes(child.pid) or 0
                        for child in multiprocessing.active_children()
                        if child.pid is not None
                    ),
                )
                for future in done:
                    results[pending.pop(future)] = future.result()  # raises the part's error
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            for child in multiprocessing.active_children():
                child.terminate()
            _forward(lines, log)
            raise
    _forward(lines, log)  # the lines still in flight when the last part returned (its process has exited now)
    log(f"convert: {len(parts)} parts in {jobs} processes; their resident memory together peaked at {gigabytes(peak)}")
    return results


# In a worker process: the queue its log lines go to (set once when the process starts).
_worker: dict[str, Any] = {}


def _keep_queue(lines: Any) -> None:
    _worker["lines"] = lines


def _run_part(work: Work, part: str) -> Any:
    lines = _worker["lines"]
    return work(part, log=lambda line: lines.put(f"[{part}] {line}"))


def _forward(lines: Any, log: Callable[[str], None]) -> None:
    while True:
        try:
            log(lines.get_nowait())
        except queue.Empty:
            return


def choose_jobs(peaks: Mapping[str, int], jobs: int | None, *, log: Callable[[str], None]) -> int:
    """`jobs` when given, else default_jobs for this machine; logs the choice and the figures behind it."""
    available, cpus = available_memory_bytes(), os.cpu_count() or 1
    chosen = default_jobs(list(peaks.values()), available=available, cpus=cpus) if jobs is None else jobs
    free = f"{gigabytes(available)} available" if available is not None else "available memory unknown"
    estimates = ", ".join(f"{part} {gigabytes(size)}" for part, size in peaks.items())
    how = "as many as the free memory holds" if jobs is None else "as asked"
    log(f"convert: {chosen} job(s), {how} (estimated peaks: {estimates}; {free}; {cpus} CPUs)")
    return chosen
