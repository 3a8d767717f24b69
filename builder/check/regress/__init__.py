"""`klein-web regress`: the built app in a real browser, its image compared with a reference."""
