"""`klein-web regress` and `bench`: the built app in a real browser, and its speed against PyTorch."""
