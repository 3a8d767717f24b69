"""The checks that drive the built app in a real browser, and the benchmarks; three wings:

    driver   the shared app driver: finding and launching Chromium (chromium, session), serving the app and a
             model folder (serving), driving the page like a user (page), memory samplers (memory, wasm_heap)
    regress  `klein-web regress`: its cases, one case through the page, verdicts and the report folder
    bench    `klein-web bench` (native, graphs, models, stats, report, output, ort_timing), `--browser-overhead`
             (overhead), `browser-bench` (browser) and `load-bench` (load)

regress and bench import the driver and the layers below it, never each other (tests/test_layering.py).
"""
