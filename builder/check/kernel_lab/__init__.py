"""The kernel lab: our WGSL kernels (web_src/src/kernels/) run in Chromium on a device created the way the app creates
it, checked against numpy in float64 and timed with timestamp queries beside onnxruntime-web's equivalent graph on
the same device (`klein-web kernel-lab`; docs/kernels.md).

prng (the inputs, as the page makes them), shapes (klein-4B's sizes), one module per kernel (its cases, its numpy
reference, its onnxruntime graph), kernels (the list of them), cases (what the page is given), site (the lab's
bundle), server and browser (serving it, driving Chromium), check (outputs against the references), report
(the table and the JSON), run (all of it, one call).
"""
