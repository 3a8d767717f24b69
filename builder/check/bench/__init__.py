"""The benchmarks: `bench` (the WebGPU EP against PyTorch), `browser-bench`, `load-bench`, the browser overhead."""
