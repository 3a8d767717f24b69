"""The shared app driver of regress and the benchmarks: Chromium, the served app, the page, memory samplers."""
