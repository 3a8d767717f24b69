"""`klein-web fetch`, `convert` and `make-tiny`: the model repository, its layout, and how its graphs are made."""
