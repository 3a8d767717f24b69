"""`klein-web build` and `serve`: bundle web_src/ into a static site and serve it with the headers WebGPU needs."""
