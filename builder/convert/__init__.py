"""`klein-web convert` and `make-tiny`: a diffusers checkpoint -> the ONNX graphs of a model repository.

Writes what builder/repo reads: the graphs, their data files and the manifest. Needs the `convert` extra (torch,
diffusers, onnx): only the command line and the bench import it, so `serve`, `fetch` and `regress` run without.
"""
