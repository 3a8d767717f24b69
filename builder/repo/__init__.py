"""`klein-web fetch` and what reads a model repository: its format (the manifest), download and verification."""
